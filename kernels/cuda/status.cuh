// CudaStatus: how the CUDA kernels report failures without engine types. Every entry point
// returns one; `call` names the CUDA/cuBLAS call or kernel that failed (nullptr = success).
// The engine turns it into a Status; nothing here exits or aborts.
#pragma once
#include <cuda_runtime.h>

#include <string>

namespace mt::cuda {

struct [[nodiscard]] CudaStatus {
  const char* call = nullptr;  // what failed; nullptr when ok
  int code = 0;                // cudaError_t or cublasStatus_t
  bool cublas = false;         // which of the two `code` is
  bool ok() const { return call == nullptr; }
};

inline CudaStatus check_cuda(cudaError_t e, const char* call) {
  return e == cudaSuccess ? CudaStatus{} : CudaStatus{call, int(e), false};
}
// After a kernel launch: reports launch-configuration errors (asynchronous faults surface at
// the next synchronising call).
inline CudaStatus launched(const char* kernel) { return check_cuda(cudaGetLastError(), kernel); }
inline CudaStatus invalid_value(const char* what) { return {what, int(cudaErrorInvalidValue), false}; }

// "cudaMemcpyAsync failed: out of memory (cudaErrorMemoryAllocation)".
std::string describe(const CudaStatus& s);

}  // namespace mt::cuda

#define MT_CUDA_TRY(expr)                        \
  do {                                           \
    ::mt::cuda::CudaStatus mt_cs_ = (expr);      \
    if (!mt_cs_.ok()) return mt_cs_;             \
  } while (0)
#define MT_CUDA_CALL(expr) MT_CUDA_TRY(::mt::cuda::check_cuda((expr), #expr))

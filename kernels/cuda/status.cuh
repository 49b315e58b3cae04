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
// Kernel launches report through the thread's last error, which any earlier runtime call on the
// thread may have left set (a failed allocation, a cudaEventQuery that answered "not ready").
// So every launch site is bracketed: clear_last_error() right before the <<<...>>>, launched()
// right after, and launched() reports this launch's own error (launch configuration, or a
// sticky fault that already poisoned the context). Asynchronous faults of the kernel itself
// surface at a later synchronising call or event query.
inline void clear_last_error() { (void)cudaGetLastError(); }
inline CudaStatus launched(const char* kernel) { return check_cuda(cudaGetLastError(), kernel); }

// Errors after which the context is unusable: the CUDA headers (driver_types.h) document each
// as "the process must be terminated and relaunched" (plus uncorrectable ECC / NVLink errors).
// Every later CUDA call in the process returns the same error, so the only recovery is a new
// process (megatraind exits non-zero; systemd restarts it; the job resumes from its checkpoint).
inline bool is_sticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorTensorMemoryLeak:
    case cudaErrorMpsClientTerminated:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
      return true;
    default:
      return false;
  }
}
inline bool is_sticky(const CudaStatus& s) { return !s.ok() && !s.cublas && is_sticky(cudaError_t(s.code)); }
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

#include <cublas_api.h>

#include "kernels/cuda/status.cuh"

namespace mt::cuda {

std::string describe(const CudaStatus& s) {
  if (s.ok()) return "ok";
  std::string m = std::string(s.call) + " failed: ";
  if (s.cublas) {
    m += cublasGetStatusString(cublasStatus_t(s.code));
  } else {
    const cudaError_t e = cudaError_t(s.code);
    m += std::string(cudaGetErrorString(e)) + " (" + cudaGetErrorName(e) + ")";
  }
  return m;
}

}  // namespace mt::cuda

// What the cuDNN frontend's open-source engines (cudnn_frontend/experimental: its sm_100 RMSNorm
// and SDPA kernels, compiled by NVRTC and loaded as CUDA libraries) link against, refused on the
// emulated device. attention_cudnn.cc reaches Graph::create_execution_plans and check_support
// (cudnn_check_engines: cuDNN's heuristics for a described device, on any machine), which name
// those engines; CudnnAttention asks heuristics mode A only, so none of them is ever run here.
#include <cuda_runtime_api.h>

extern "C" {

cudaError_t cudaLibraryLoadData(cudaLibrary_t*, const void*, cudaJitOption*, void**, unsigned int, cudaLibraryOption*,
                                void**, unsigned int) {
  return cudaErrorNotSupported;
}
cudaError_t cudaLibraryUnload(cudaLibrary_t) { return cudaErrorNotSupported; }
cudaError_t cudaLibraryGetKernel(cudaKernel_t*, cudaLibrary_t, const char*) { return cudaErrorNotSupported; }
cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t, cudaFuncAttribute, int, int) {
  return cudaErrorNotSupported;
}
cudaError_t cudaLaunchKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t) { return cudaErrorNotSupported; }

}  // extern "C"

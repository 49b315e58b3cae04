#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/util.cuh"

namespace mt::cuda {

namespace {

template <typename T>
__global__ void add_inplace_kernel(T* y, const T* x, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    y[i] = detail::st<T>(detail::ld(y[i]) + detail::ld(x[i]));
}

template <typename T>
__global__ void scale_inplace_kernel(T* y, float s, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    y[i] = detail::st<T>(detail::ld(y[i]) * s);
}

template <typename D, typename S>
__global__ void convert_dtype_kernel(D* dst, const S* src, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = detail::st<D>(detail::ld(src[i]));
}

}  // namespace

template <typename T>
CudaStatus add_inplace(T* y, const T* x, size_t n, cudaStream_t stream) {
  if (n == 0) return {};
  clear_last_error();
  add_inplace_kernel<<<detail::blocks_for(n, 256), 256, 0, stream>>>(y, x, n);
  return launched("add_inplace_kernel");
}

template <typename T>
CudaStatus scale_inplace(T* y, float s, size_t n, cudaStream_t stream) {
  if (n == 0) return {};
  clear_last_error();
  scale_inplace_kernel<<<detail::blocks_for(n, 256), 256, 0, stream>>>(y, s, n);
  return launched("scale_inplace_kernel");
}

CudaStatus copy_bytes(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return {};
  return check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync(D2D)");
}

CudaStatus zero_bytes(void* dst, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return {};
  return check_cuda(cudaMemsetAsync(dst, 0, bytes, stream), "cudaMemsetAsync");
}

CudaStatus convert_f32_to_bf16(__nv_bfloat16* dst, const float* src, size_t n, cudaStream_t stream) {
  if (n == 0) return {};
  clear_last_error();
  convert_dtype_kernel<<<detail::blocks_for(n, 256), 256, 0, stream>>>(dst, src, n);
  return launched("convert_dtype_kernel<f32->bf16>");
}

CudaStatus convert_bf16_to_f32(float* dst, const __nv_bfloat16* src, size_t n, cudaStream_t stream) {
  if (n == 0) return {};
  clear_last_error();
  convert_dtype_kernel<<<detail::blocks_for(n, 256), 256, 0, stream>>>(dst, src, n);
  return launched("convert_dtype_kernel<bf16->f32>");
}

template CudaStatus add_inplace<float>(float*, const float*, size_t, cudaStream_t);
template CudaStatus add_inplace<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*, size_t, cudaStream_t);
template CudaStatus scale_inplace<float>(float*, float, size_t, cudaStream_t);
template CudaStatus scale_inplace<__nv_bfloat16>(__nv_bfloat16*, float, size_t, cudaStream_t);

}  // namespace mt::cuda

#include <cuda_bf16.h>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/swiglu.cuh"

namespace mt::cuda {

namespace {

using detail::ld;
using detail::st;

template <typename T>
__global__ void swiglu_forward_kernel(T* out, const T* gu, int N, int F) {
  const size_t total = size_t(N) * F;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const size_t n = i / F, f = i % F;
    const float g = ld(gu[n * 2 * F + f]), u = ld(gu[n * 2 * F + F + f]);
    const float s = 1.f / (1.f + expf(-g));
    out[i] = st<T>(g * s * u);
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(T* dgu, const T* dout, const T* gu, int N, int F) {
  const size_t total = size_t(N) * F;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const size_t n = i / F, f = i % F;
    const float g = ld(gu[n * 2 * F + f]), u = ld(gu[n * 2 * F + F + f]), dy = ld(dout[i]);
    const float s = 1.f / (1.f + expf(-g));
    const float silu = g * s;
    dgu[n * 2 * F + f] = st<T>(dy * u * (s + silu * (1.f - s)));
    dgu[n * 2 * F + F + f] = st<T>(dy * silu);
  }
}

}  // namespace

template <typename T>
CudaStatus swiglu_forward(T* out, const T* gu, int N, int F, cudaStream_t stream) {
  if (N <= 0 || F <= 0) return {};
  clear_last_error();
  swiglu_forward_kernel<<<detail::blocks_for(size_t(N) * F, 256), 256, 0, stream>>>(out, gu, N, F);
  return launched("swiglu_forward_kernel");
}

template <typename T>
CudaStatus swiglu_backward(T* dgu, const T* dout, const T* gu, int N, int F, cudaStream_t stream) {
  if (N <= 0 || F <= 0) return {};
  clear_last_error();
  swiglu_backward_kernel<<<detail::blocks_for(size_t(N) * F, 256), 256, 0, stream>>>(dgu, dout, gu, N, F);
  return launched("swiglu_backward_kernel");
}

#define MT_INSTANTIATE(T)                                                                  \
  template CudaStatus swiglu_forward<T>(T*, const T*, int, int, cudaStream_t); \
  template CudaStatus swiglu_backward<T>(T*, const T*, const T*, int, int, cudaStream_t);
MT_INSTANTIATE(float)
MT_INSTANTIATE(__nv_bfloat16)
#undef MT_INSTANTIATE

}  // namespace mt::cuda

#include <cuda_bf16.h>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/swiglu.cuh"

namespace mt::cuda {

namespace {

using detail::ld;
using detail::st;

template <typename T>
__global__ void swiglu_forward_kernel(T* out, const T* gu, int N, int F) {
  MT_FOR_ROWS(n, N) {
    const T* g_row = gu + size_t(n) * 2 * F;  // [gate | up]
    T* o = out + size_t(n) * F;
    MT_FOR_COLS(f, F) {
      const float g = ld(g_row[f]), u = ld(g_row[F + f]);
      const float s = 1.f / (1.f + expf(-g));
      o[f] = st<T>(g * s * u);
    }
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(T* dgu, const T* dout, const T* gu, int N, int F) {
  MT_FOR_ROWS(n, N) {
    const T* g_row = gu + size_t(n) * 2 * F;
    const T* dy_row = dout + size_t(n) * F;
    T* d_row = dgu + size_t(n) * 2 * F;
    MT_FOR_COLS(f, F) {
      const float g = ld(g_row[f]), u = ld(g_row[F + f]), dy = ld(dy_row[f]);
      const float s = 1.f / (1.f + expf(-g));
      const float silu = g * s;
      d_row[f] = st<T>(dy * u * (s + silu * (1.f - s)));
      d_row[F + f] = st<T>(dy * silu);
    }
  }
}

}  // namespace

template <typename T>
CudaStatus swiglu_forward(T* out, const T* gu, int N, int F, cudaStream_t stream) {
  if (N <= 0 || F <= 0) return {};
  clear_last_error();
  swiglu_forward_kernel<<<detail::rows_grid(N, F, 256), 256, 0, stream>>>(out, gu, N, F);
  return launched("swiglu_forward_kernel");
}

template <typename T>
CudaStatus swiglu_backward(T* dgu, const T* dout, const T* gu, int N, int F, cudaStream_t stream) {
  if (N <= 0 || F <= 0) return {};
  clear_last_error();
  swiglu_backward_kernel<<<detail::rows_grid(N, F, 256), 256, 0, stream>>>(dgu, dout, gu, N, F);
  return launched("swiglu_backward_kernel");
}

#define MT_INSTANTIATE(T)                                                                  \
  template CudaStatus swiglu_forward<T>(T*, const T*, int, int, cudaStream_t); \
  template CudaStatus swiglu_backward<T>(T*, const T*, const T*, int, int, cudaStream_t);
MT_INSTANTIATE(float)
MT_INSTANTIATE(__nv_bfloat16)
#undef MT_INSTANTIATE

}  // namespace mt::cuda

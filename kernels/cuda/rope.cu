#include <cuda_bf16.h>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/rope.cuh"

namespace mt::cuda {

namespace {

// One thread per (token, pair i), for every q and k head of the token: the angle's sincos (in
// double, the kernel's costliest part) once per token and pair instead of once per head; each
// head's (x[i], x[i + D/2]) rotated by sign * angle exactly as before.
template <typename T>
__global__ void rope_kernel(T* qkv, const float* inv_freq, const int32_t* pos_ids, int rows, int T_, int heads,
                            int D, long row_len, float sign, double scale) {
  const int half = D / 2;
  MT_FOR_ROWS(row, rows) {
    const int pos = pos_ids ? pos_ids[row] : row % T_;
    T* x0 = qkv + size_t(row) * row_len;
    MT_FOR_COLS(i, half) {
      double sd, cd;
      sincos(double(pos) * double(inv_freq[i]), &sd, &cd);
      const float c = float(cd * scale), s = sign * float(sd * scale);
      for (int h = 0; h < heads; ++h) {
        T* x = x0 + size_t(h) * D;
        const float x1 = detail::ld(x[i]), x2 = detail::ld(x[i + half]);
        x[i] = detail::st<T>(x1 * c - x2 * s);
        x[i + half] = detail::st<T>(x2 * c + x1 * s);
      }
    }
  }
}

template <typename T>
CudaStatus rope_apply(T* qkv, const float* inv_freq, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                      float sign, float scale, cudaStream_t stream) {
  if (B <= 0 || T_ <= 0) return {};
  if (D % 2) return invalid_value("rope: head_dim must be even");
  const unsigned threads = D / 2 >= 64 ? 64 : 32;  // the pairs of a head: D / 2 for D = 128
  clear_last_error();
  rope_kernel<<<detail::rows_grid(B * T_, D / 2, threads), threads, 0, stream>>>(
      qkv, inv_freq, pos, B * T_, T_, H + KVH, D, long(H + 2 * KVH) * D, sign, double(scale));
  return launched("rope_kernel");
}

}  // namespace

template <typename T>
CudaStatus rope_forward(T* qkv, const float* f, const int32_t* pos, int B, int T_, int H, int KVH, int D, float scale,
                        cudaStream_t s) {
  return rope_apply(qkv, f, pos, B, T_, H, KVH, D, 1.f, scale, s);
}
template <typename T>
CudaStatus rope_backward(T* dqkv, const float* f, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                         float scale, cudaStream_t s) {
  return rope_apply(dqkv, f, pos, B, T_, H, KVH, D, -1.f, scale, s);
}

#define MT_INSTANTIATE(T)                                                                               \
  template CudaStatus rope_forward<T>(T*, const float*, const int32_t*, int, int, int, int, int, float, \
                                      cudaStream_t);                                                  \
  template CudaStatus rope_backward<T>(T*, const float*, const int32_t*, int, int, int, int, int, float, \
                                       cudaStream_t);
MT_INSTANTIATE(float)
MT_INSTANTIATE(__nv_bfloat16)
#undef MT_INSTANTIATE

}  // namespace mt::cuda

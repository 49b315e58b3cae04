#include <cuda_bf16.h>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/rope.cuh"

namespace mt::cuda {

namespace {

// One thread per (token, q-or-k head, pair i): rotates (x[i], x[i + D/2]) by sign * angle.
template <typename T>
__global__ void rope_kernel(T* qkv, const float* inv_freq, const int32_t* pos_ids, int rows, int T_, int heads,
                            int D, long row_len, float sign, double scale) {
  const int half = D / 2;
  const size_t total = size_t(rows) * heads * half;
  for (size_t idx = blockIdx.x * size_t(blockDim.x) + threadIdx.x; idx < total;
       idx += size_t(gridDim.x) * blockDim.x) {
    const int i = int(idx % half);
    const size_t rh = idx / half;
    const int h = int(rh % heads);
    const int row = int(rh / heads);
    const int pos = pos_ids ? pos_ids[row] : row % T_;
    double sd, cd;
    sincos(double(pos) * double(inv_freq[i]), &sd, &cd);
    const float c = float(cd * scale), s = sign * float(sd * scale);
    T* x = qkv + size_t(row) * row_len + size_t(h) * D;
    const float x1 = detail::ld(x[i]), x2 = detail::ld(x[i + half]);
    x[i] = detail::st<T>(x1 * c - x2 * s);
    x[i + half] = detail::st<T>(x2 * c + x1 * s);
  }
}

template <typename T>
CudaStatus rope_apply(T* qkv, const float* inv_freq, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                      float sign, float scale, cudaStream_t stream) {
  if (B <= 0 || T_ <= 0) return {};
  if (D % 2) return invalid_value("rope: head_dim must be even");
  const size_t total = size_t(B) * T_ * (H + KVH) * (D / 2);
  clear_last_error();
  rope_kernel<<<detail::blocks_for(total, 256), 256, 0, stream>>>(qkv, inv_freq, pos, B * T_, T_, H + KVH,
                                                                  D, long(H + 2 * KVH) * D, sign, double(scale));
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

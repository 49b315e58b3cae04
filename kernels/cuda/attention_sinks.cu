// Attention sinks on CUDA (kernels/cuda/attention_sinks.cuh): the forward a warp per (b, h, t)
// row of out; the backward's per-head sum through fixed row-block partials and an ordered
// second pass (no atomics), as rmsnorm.cu's dweight.
#include <cuda_bf16.h>

#include "kernels/cuda/attention_sinks.cuh"
#include "kernels/cuda/device_util.cuh"

namespace mt::cuda {

namespace {

using detail::ld;
using detail::st;

constexpr int kWarps = 8;       // rows per block
constexpr int kPartRows = 64;   // minimum rows (b, t) per partial
constexpr int kMaxParts = 256;  // at most this many partials per head (bounds the scratch)

int rows_per_part(int rows) {
  const int by_cap = (rows + kMaxParts - 1) / kMaxParts;
  return by_cap > kPartRows ? by_cap : kPartRows;
}

// Warp `item` = (b * H + h) * T + t: lse's own index.
template <typename T>
__global__ void attention_sinks_forward_kernel(T* out, float* lse, const T* sinks, int B, int T_, int H, int D) {
  const size_t item = size_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (item >= size_t(B) * H * T_) return;
  const int t = int(item % T_), h = int(item / T_ % H), b = int(item / T_ / H);
  const float l = lse[item], sink = ld(sinks[h]);
  const float m = fmaxf(l, sink);
  const float folded = m + logf(expf(l - m) + expf(sink - m));
  const float scale = expf(l - folded);
  T* o = out + (size_t(b) * T_ + t) * size_t(H) * D + size_t(h) * D;
  for (int d = lane; d < D; d += 32) o[d] = st<T>(ld(o[d]) * scale);
  __syncwarp();  // every lane has read lse before it is overwritten
  if (lane == 0) lse[item] = folded;
}

// partial[h * parts + p] = sum over rows (b, t) of part p of exp(sink[h] - lse) (dout . out):
// warp w sums rows r0 + w, r0 + w + kWarps, ... in order, then the warps in order.
template <typename T>
__global__ void attention_sinks_partial_kernel(float* partial, const T* dout, const T* out, const float* lse,
                                               const T* sinks, int B, int T_, int H, int D, int rows, int parts) {
  __shared__ float warp_sums[kWarps];
  const int p = blockIdx.x, h = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int n = B * T_, r0 = p * rows, r1 = min(n, r0 + rows);
  const float sink = ld(sinks[h]);
  float acc = 0.f;
  for (int r = r0 + warp; r < r1; r += kWarps) {
    const size_t off = size_t(r) * H * D + size_t(h) * D;
    float dot = 0.f;
    for (int d = lane; d < D; d += 32) dot += ld(dout[off + d]) * ld(out[off + d]);
    dot = detail::warp_sum(dot);
    const int b = r / T_, t = r % T_;
    acc += expf(sink - lse[(size_t(b) * H + h) * T_ + t]) * dot;
  }
  if (lane == 0) warp_sums[warp] = acc;
  __syncthreads();
  if (threadIdx.x != 0) return;
  float sum = 0.f;
  for (int w = 0; w < kWarps; ++w) sum += warp_sums[w];
  partial[size_t(h) * parts + p] = sum;
}

__global__ void attention_sinks_sum_kernel(float* dsinks, const float* partial, int parts, int H) {
  const int h = blockIdx.x * blockDim.x + threadIdx.x;
  if (h >= H) return;
  float sum = 0.f;
  for (int p = 0; p < parts; ++p) sum += partial[size_t(h) * parts + p];
  dsinks[h] -= sum;
}

}  // namespace

size_t attention_sinks_backward_scratch(int B, int T_, int H) {
  const int n = B * T_;
  if (n <= 0 || H <= 0) return 0;
  const int rows = rows_per_part(n);
  return size_t((n + rows - 1) / rows) * size_t(H);
}

template <typename T>
CudaStatus attention_sinks_forward(T* out, float* lse, const T* sinks, int B, int T_, int H, int D,
                                   cudaStream_t stream) {
  const size_t items = size_t(B) * T_ * H;
  if (B <= 0 || T_ <= 0 || H <= 0 || D <= 0) return {};
  clear_last_error();
  attention_sinks_forward_kernel<<<unsigned((items + kWarps - 1) / kWarps), 32 * kWarps, 0, stream>>>(out, lse, sinks,
                                                                                                      B, T_, H, D);
  return launched("attention_sinks_forward_kernel");
}

template <typename T>
CudaStatus attention_sinks_backward(float* dsinks, const T* dout, const T* out, const float* lse, const T* sinks, int B,
                                    int T_, int H, int D, float* scratch, cudaStream_t stream) {
  const int n = B * T_;
  if (n <= 0 || H <= 0) return {};
  if (!scratch) return invalid_value("attention_sinks_backward: scratch is required");
  const int rows = rows_per_part(n), parts = (n + rows - 1) / rows;
  clear_last_error();
  attention_sinks_partial_kernel<<<dim3(parts, H), 32 * kWarps, 0, stream>>>(scratch, dout, out, lse, sinks, B, T_, H,
                                                                             D, rows, parts);
  MT_CUDA_TRY(launched("attention_sinks_partial_kernel"));
  clear_last_error();
  attention_sinks_sum_kernel<<<(H + 127) / 128, 128, 0, stream>>>(dsinks, scratch, parts, H);
  return launched("attention_sinks_sum_kernel");
}

#define MT_INSTANTIATE(T)                                                                                            \
  template CudaStatus attention_sinks_forward<T>(T*, float*, const T*, int, int, int, int, cudaStream_t);            \
  template CudaStatus attention_sinks_backward<T>(float*, const T*, const T*, const float*, const T*, int, int, int, \
                                                  int, float*, cudaStream_t);
MT_INSTANTIATE(float)
MT_INSTANTIATE(__nv_bfloat16)
#undef MT_INSTANTIATE

}  // namespace mt::cuda

// Q/K normalisation on CUDA: one warp per (row, vector) for the row-wise parts, the v part
// copied by the same blocks; weight gradients through fixed row-block partials and an ordered
// second pass (no atomics), as rmsnorm.cu.
#include <cuda_bf16.h>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/qk_norm.cuh"
#include "kernels/rmsnorm.h"

namespace mt::cuda {
namespace {

using detail::ld;
using detail::st;
constexpr int kWarps = 8;
constexpr int kPartRows = 16;
constexpr int kMaxParts = cpu::kRmsnormMaxParts;
constexpr int kCols = 128;

int rows_per_part(int N) {
  const int by_cap = (N + kMaxParts - 1) / kMaxParts;
  return by_cap > kPartRows ? by_cap : kPartRows;
}

// Vector j of a row: offset in the row and width (q's vectors, then k's).
__device__ __forceinline__ void vec(const QkNormShape& s, int j, long* off, int* width, bool* is_q) {
  *is_q = j < s.q_vectors();
  if (*is_q) {
    *off = long(j) * s.q_width(), *width = s.q_width();
  } else {
    *off = long(s.H) * s.D + long(j - s.q_vectors()) * s.k_width(), *width = s.k_width();
  }
}

template <typename T>
__global__ void forward_kernel(T* qkv, float* rstd, const T* raw, const T* wq, const T* wk, QkNormShape s, float eps,
                               float off) {
  const long task = long(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31, nv = s.vectors();
  if (task >= long(s.N) * (nv + 1)) return;
  const int n = int(task / (nv + 1)), j = int(task % (nv + 1));
  const long row = s.row();
  if (j == nv) {  // this warp copies the row's v
    const long v0 = row - long(s.KVH) * s.D;
    for (long c = v0 + lane; c < row; c += 32) qkv[n * row + c] = raw[n * row + c];
    return;
  }
  long o;
  int width;
  bool is_q;
  vec(s, j, &o, &width, &is_q);
  const T* w = is_q ? wq : wk;
  const T* x = raw + n * row + o;
  double ss = 0;
  for (int c = lane; c < width; c += 32) {
    const double v = ld(x[c]);
    ss += v * v;
  }
  ss = detail::warp_sum(ss);
  const float r = float(1.0 / sqrt(ss / width + double(eps)));
  if (lane == 0) rstd[long(n) * nv + j] = r;
  T* y = qkv + n * row + o;
  for (int c = lane; c < width; c += 32) y[c] = st<T>(ld(x[c]) * r * (ld(w[c]) + off));
}

template <typename T>
__global__ void dinp_kernel(T* draw, const T* dqkv, const T* raw, const T* wq, const T* wk, const float* rstd,
                            QkNormShape s, float off) {
  const long task = long(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31, nv = s.vectors();
  if (task >= long(s.N) * (nv + 1)) return;
  const int n = int(task / (nv + 1)), j = int(task % (nv + 1));
  const long row = s.row();
  if (j == nv) {
    const long v0 = row - long(s.KVH) * s.D;
    for (long c = v0 + lane; c < row; c += 32) draw[n * row + c] = dqkv[n * row + c];
    return;
  }
  long o;
  int width;
  bool is_q;
  vec(s, j, &o, &width, &is_q);
  const T* w = is_q ? wq : wk;
  const T* x = raw + n * row + o;
  const T* dy = dqkv + n * row + o;
  T* dx = draw + n * row + o;
  const float r = rstd[long(n) * nv + j];
  double dot = 0;
  for (int c = lane; c < width; c += 32) dot += double(ld(dy[c])) * double(ld(w[c]) + off) * double(ld(x[c]));
  dot = detail::warp_sum(dot);
  const float k = float(dot * double(r) * double(r) * double(r) / width);
  for (int c = lane; c < width; c += 32) dx[c] = st<T>(ld(dy[c]) * (ld(w[c]) + off) * r - k * ld(x[c]));
}

// partial[p][c] = sum over rows of part p, then over the vectors first.. first + count - 1 of
// each row, of dy * x * rstd at column c.
template <typename T>
__global__ void dweight_partial_kernel(float* partial, const T* dqkv, const T* raw, const float* rstd, QkNormShape s,
                                       int first, int count, int width, long base, int rows) {
  const int c = blockIdx.x * kCols + threadIdx.x, p = blockIdx.y;
  if (c >= width) return;
  const int r0 = p * rows, r1 = min(s.N, r0 + rows), nv = s.vectors();
  const long row = s.row();
  float acc = 0.f;
  for (int n = r0; n < r1; ++n)
    for (int j = 0; j < count; ++j) {
      const long at = n * row + base + long(j) * width + c;
      acc += ld(dqkv[at]) * ld(raw[at]) * rstd[long(n) * nv + first + j];
    }
  partial[size_t(p) * width + c] = acc;
}

__global__ void dweight_sum_kernel(float* dweight, const float* partial, int parts, int width) {
  const int c = blockIdx.x * kCols + threadIdx.x;
  if (c >= width) return;
  float acc = 0.f;
  for (int p = 0; p < parts; ++p) acc += partial[size_t(p) * width + c];
  dweight[c] += acc;
}

unsigned warp_blocks(const QkNormShape& s) {
  return unsigned((long(s.N) * (s.vectors() + 1) + kWarps - 1) / kWarps);
}

}  // namespace

size_t qk_norm_backward_scratch(const QkNormShape& s) {
  if (s.N <= 0) return 0;
  const int rows = rows_per_part(s.N);
  return size_t((s.N + rows - 1) / rows) * size_t(std::max(s.q_width(), s.k_width()));
}

template <typename T>
CudaStatus qk_norm_forward(T* qkv, float* rstd, const T* raw, const T* wq, const T* wk, const QkNormShape& s, float eps,
                           float offset, cudaStream_t stream) {
  if (s.N <= 0) return {};
  clear_last_error();
  forward_kernel<<<warp_blocks(s), 32 * kWarps, 0, stream>>>(qkv, rstd, raw, wq, wk, s, eps, offset);
  return launched("qk_norm_forward_kernel");
}

template <typename T>
CudaStatus qk_norm_backward(T* draw, float* dwq, float* dwk, const T* dqkv, const T* raw, const T* wq, const T* wk,
                            const float* rstd, const QkNormShape& s, float offset, float* scratch, cudaStream_t stream) {
  if (s.N <= 0) return {};
  clear_last_error();
  dinp_kernel<<<warp_blocks(s), 32 * kWarps, 0, stream>>>(draw, dqkv, raw, wq, wk, rstd, s, offset);
  MT_CUDA_TRY(launched("qk_norm_backward_dinp_kernel"));
  const int rows = rows_per_part(s.N), parts = (s.N + rows - 1) / rows;
  for (const bool q : {true, false}) {
    float* dw = q ? dwq : dwk;
    if (!dw) continue;
    if (!scratch) return invalid_value("qk_norm_backward: scratch is required for the weight gradients");
    const int first = q ? 0 : s.q_vectors(), count = q ? s.q_vectors() : s.k_vectors();
    const int width = q ? s.q_width() : s.k_width();
    const long base = q ? 0 : long(s.H) * s.D;
    clear_last_error();
    dweight_partial_kernel<<<dim3((width + kCols - 1) / kCols, parts), kCols, 0, stream>>>(
        scratch, dqkv, raw, rstd, s, first, count, width, base, rows);
    MT_CUDA_TRY(launched("qk_norm_dweight_partial_kernel"));
    clear_last_error();
    dweight_sum_kernel<<<(width + kCols - 1) / kCols, kCols, 0, stream>>>(dw, scratch, parts, width);
    MT_CUDA_TRY(launched("qk_norm_dweight_sum_kernel"));
  }
  return {};
}

#define MT_INSTANTIATE(T)                                                                                      \
  template CudaStatus qk_norm_forward<T>(T*, float*, const T*, const T*, const T*, const QkNormShape&, float,   \
                                         float, cudaStream_t);                                                 \
  template CudaStatus qk_norm_backward<T>(T*, float*, float*, const T*, const T*, const T*, const T*, const float*, \
                                          const QkNormShape&, float, float*, cudaStream_t);
MT_INSTANTIATE(float)
MT_INSTANTIATE(__nv_bfloat16)
#undef MT_INSTANTIATE

}  // namespace mt::cuda

// RMSNorm on CUDA: one warp per row for the row-wise parts; dweight through fixed row-block
// partials and an ordered second pass (no atomics).
#include <cuda_bf16.h>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/rmsnorm.h"

namespace mt::cuda {

namespace {

using detail::ld;
using detail::st;
constexpr int kWarps = 8;        // rows per block in the row kernels
constexpr int kPartRows = 64;    // minimum rows per dweight partial
constexpr int kMaxParts = cpu::kRmsnormMaxParts;  // at most this many partials (bounds the scratch)
constexpr int kCols = 128;       // columns per block in the dweight kernels

int rows_per_part(int N) {
  const int by_cap = (N + kMaxParts - 1) / kMaxParts;
  return by_cap > kPartRows ? by_cap : kPartRows;
}

template <typename T>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd, const T* inp, const T* w, int N, int C, float eps,
                                       float off) {
  const int row = blockIdx.x * kWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= N) return;
  const T* x = inp + size_t(row) * C;
  double ss = 0;
  for (int c = lane; c < C; c += 32) {
    const double v = ld(x[c]);
    ss += v * v;
  }
  ss = detail::warp_sum(ss);
  const float r = float(1.0 / sqrt(ss / C + double(eps)));
  if (lane == 0) rstd[row] = r;
  T* y = out + size_t(row) * C;
  for (int c = lane; c < C; c += 32) y[c] = st<T>(ld(x[c]) * r * (ld(w[c]) + off));
}

template <typename T>
__global__ void rmsnorm_backward_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* w, const float* rstd, int N,
                                             int C, float off) {
  const int row = blockIdx.x * kWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= N) return;
  const T* x = inp + size_t(row) * C;
  const T* dy = dout + size_t(row) * C;
  T* dx = dinp + size_t(row) * C;
  const float r = rstd[row];
  double dot = 0;
  for (int c = lane; c < C; c += 32) dot += double(ld(dy[c])) * double(ld(w[c]) + off) * double(ld(x[c]));
  dot = detail::warp_sum(dot);
  const float k = float(dot * double(r) * double(r) * double(r) / C);
  for (int c = lane; c < C; c += 32)
    dx[c] = st<T>(ld(dx[c]) + (ld(dy[c]) * (ld(w[c]) + off) * r - k * ld(x[c])));
}

// partial[p][c] = sum over rows of part p (in order) of dy * x * rstd.
template <typename T>
__global__ void rmsnorm_dweight_partial_kernel(float* partial, const T* dout, const T* inp, const float* rstd, int N,
                                               int C, int rows) {
  const int c = blockIdx.x * kCols + threadIdx.x, p = blockIdx.y;
  if (c >= C) return;
  const int r0 = p * rows, r1 = min(N, r0 + rows);
  float acc = 0.f;
  for (int n = r0; n < r1; ++n) acc += ld(dout[size_t(n) * C + c]) * ld(inp[size_t(n) * C + c]) * rstd[n];
  partial[size_t(p) * C + c] = acc;
}

template <typename G>
__global__ void rmsnorm_dweight_sum_kernel(G* dweight, const float* partial, int parts, int C) {
  const int c = blockIdx.x * kCols + threadIdx.x;
  if (c >= C) return;
  float acc = 0.f;
  for (int p = 0; p < parts; ++p) acc += partial[size_t(p) * C + c];
  dweight[c] = st<G>(ld(dweight[c]) + acc);
}

}  // namespace

size_t rmsnorm_backward_scratch(int N, int C) {
  if (N <= 0 || C <= 0) return 0;
  const int rows = rows_per_part(N);
  return size_t((N + rows - 1) / rows) * size_t(C);
}

template <typename T>
CudaStatus rmsnorm_forward(T* out, float* rstd, const T* inp, const T* w, int N, int C, float eps,
                           cudaStream_t stream, float offset) {
  if (N <= 0) return {};
  clear_last_error();
  rmsnorm_forward_kernel<<<(N + kWarps - 1) / kWarps, 32 * kWarps, 0, stream>>>(out, rstd, inp, w, N, C, eps, offset);
  return launched("rmsnorm_forward_kernel");
}

template <typename T, typename G>
CudaStatus rmsnorm_backward(T* dinp, G* dweight, const T* dout, const T* inp, const T* w, const float* rstd, int N,
                            int C, float* scratch, cudaStream_t stream, float offset) {
  if (N <= 0) return {};
  if (dinp) {
    clear_last_error();
    rmsnorm_backward_dinp_kernel<<<(N + kWarps - 1) / kWarps, 32 * kWarps, 0, stream>>>(dinp, dout, inp, w, rstd, N, C,
                                                                                         offset);
    MT_CUDA_TRY(launched("rmsnorm_backward_dinp_kernel"));
  }
  if (!dweight) return {};
  if (!scratch) return invalid_value("rmsnorm_backward: scratch is required for dweight");
  const int rows = rows_per_part(N), parts = (N + rows - 1) / rows;
  clear_last_error();
  rmsnorm_dweight_partial_kernel<<<dim3((C + kCols - 1) / kCols, parts), kCols, 0, stream>>>(scratch, dout, inp, rstd,
                                                                                             N, C, rows);
  MT_CUDA_TRY(launched("rmsnorm_dweight_partial_kernel"));
  clear_last_error();
  rmsnorm_dweight_sum_kernel<<<(C + kCols - 1) / kCols, kCols, 0, stream>>>(dweight, scratch, parts, C);
  return launched("rmsnorm_dweight_sum_kernel");
}

#define MT_INSTANTIATE(T, G)                                                                                \
  template CudaStatus rmsnorm_forward<T>(T*, float*, const T*, const T*, int, int, float, cudaStream_t, float); \
  template CudaStatus rmsnorm_backward<T, G>(T*, G*, const T*, const T*, const T*, const float*, int, int, float*, \
                                             cudaStream_t, float);
MT_INSTANTIATE(float, float)
MT_INSTANTIATE(__nv_bfloat16, float)
#undef MT_INSTANTIATE

}  // namespace mt::cuda

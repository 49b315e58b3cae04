#include <cuda_bf16.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/lm_head_loss.cuh"

namespace mt::cuda {

namespace {

using detail::ld;
using detail::st;
constexpr int kThreads = 512;

// One block per row of fp32 logits: loss into row_loss[row]; with `backward`, the row's
// d(logits) = (softmax - onehot(target)) * grad_scale (zeros for an ignored target) goes to
// dlogits, rounded once to D. In fp32 dlogits is the logits row itself (in place: each thread
// reads then writes its own elements, and z[target] is read by all before any write).
// With a soft cap the row's logits are capped first, in place (the cap's slope 1 - (z/cap)^2 is a
// function of the capped value, so nothing else is kept).
template <typename D>
__global__ void __launch_bounds__(kThreads)
    lm_head_softmax_ce_kernel(float* logits, D* dlogits, double* row_loss, float* losses, const int32_t* targets, int V,
                              bool backward, float grad_scale, float cap) {
  __shared__ float red[32];
  const int row = blockIdx.x;
  float* z = logits + size_t(row) * V;
  D* dz = dlogits + size_t(row) * V;
  const int32_t target = targets[row];
  const bool counted = target >= 0 && target < V;
  if (!counted) {
    if (backward)
      for (int v = threadIdx.x; v < V; v += blockDim.x) dz[v] = st<D>(0.f);
    if (threadIdx.x == 0) row_loss[row] = 0.0;
    if (threadIdx.x == 0 && losses) losses[row] = 0.f;
    return;
  }
  if (cap > 0) {
    for (int v = threadIdx.x; v < V; v += blockDim.x) z[v] = cap * tanhf(z[v] / cap);
    __syncthreads();  // z[target] is read by every thread below
  }
  float mx = -INFINITY;
  for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, z[v]);
  mx = detail::block_reduce(mx, red, detail::Max{}, -INFINITY);
  float sum = 0.f;
  for (int v = threadIdx.x; v < V; v += blockDim.x) sum += expf(z[v] - mx);
  sum = detail::block_reduce(sum, red, detail::Sum{}, 0.f);
  const float zt = z[target];
  __syncthreads();  // every thread has read z[target] before the row is overwritten (fp32: in place)
  const double loss = double(mx) + log(double(sum)) - double(zt);
  if (threadIdx.x == 0) row_loss[row] = loss;
  if (threadIdx.x == 0 && losses) losses[row] = float(loss);
  if (!backward) return;
  const float k = (1.f / sum) * grad_scale;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    const float g = expf(z[v] - mx) * k;
    const float slope = cap > 0 ? 1.f - (z[v] / cap) * (z[v] / cap) : 1.f;
    dz[v] = st<D>((v == target ? g - grad_scale : g) * slope);
  }
}

// totals = {sum of row_loss in token order, count of counted targets}: one thread, in order
// (N is a micro-batch's tokens; this is a tiny fraction of the head's GEMM time).
__global__ void lm_head_total_kernel(double* totals, const double* row_loss, const int32_t* targets, int N, int V) {
  double s = 0;
  long c = 0;
  for (int n = 0; n < N; ++n) {
    const bool counted = targets[n] >= 0 && targets[n] < V;
    s += counted ? row_loss[n] : 0.0;
    c += counted ? 1 : 0;
  }
  totals[0] = s;
  totals[1] = double(c);
}

// The d(logits) of a chunk: the fp32 logits themselves (in place) for T = float; for bf16 the
// region after the chunk's fp32 logits (lm_head_loss.cuh gives the layout).
template <typename T>
T* dlogits_of(float* logits, int chunk, int V) {
  if constexpr (std::is_same_v<T, float>) return logits;
  else return reinterpret_cast<T*>(logits + size_t(chunk) * size_t(V));
}

}  // namespace

template <typename T>
CudaStatus lm_head_loss(T* dx, float* dW, float* losses, const T* x, const T* W, const int32_t* targets, int N, int C,
                        int V, int chunk, float grad_scale, void* scratch, double* row_loss, double* totals,
                        GemmContext& ctx, cudaStream_t stream, float softcap) {
  const bool backward = dx != nullptr;
  chunk = std::max(1, chunk);
  float* logits = static_cast<float*>(scratch);
  T* dlogits = dlogits_of<T>(logits, chunk, V);
  // gemm<T> takes the C type from its pointer: fp32 logits and dW, T for dx.
  for (int n0 = 0; n0 < N; n0 += chunk) {
    const int rows = std::min(chunk, N - n0);
    const T* xc = x + long(n0) * C;
    MT_CUDA_TRY(gemm<T>(false, true, rows, V, C, 1.f, xc, C, W, C, 0.f, logits, V, ctx, stream));
    clear_last_error();
    lm_head_softmax_ce_kernel<<<rows, kThreads, 0, stream>>>(logits, dlogits, row_loss + n0,
                                                             losses ? losses + n0 : nullptr, targets + n0, V, backward,
                                                             grad_scale, softcap);
    MT_CUDA_TRY(launched("lm_head_softmax_ce_kernel"));
    if (!backward) continue;
    MT_CUDA_TRY(gemm<T>(false, false, rows, C, V, 1.f, dlogits, V, W, C, 0.f, dx + long(n0) * C, C, ctx, stream));
    if (dW) MT_CUDA_TRY(gemm<T>(true, false, V, C, rows, 1.f, dlogits, V, xc, C, 1.f, dW, C, ctx, stream));
  }
  clear_last_error();
  lm_head_total_kernel<<<1, 1, 0, stream>>>(totals, row_loss, targets, N, V);
  return launched("lm_head_total_kernel");
}

#define MT_INSTANTIATE(T)                                                                                         \
  template CudaStatus lm_head_loss<T>(T*, float*, float*, const T*, const T*, const int32_t*, int, int, int, int, \
                                      float, void*, double*, double*, GemmContext&, cudaStream_t, float);
MT_INSTANTIATE(float)
MT_INSTANTIATE(__nv_bfloat16)
#undef MT_INSTANTIATE

}  // namespace mt::cuda

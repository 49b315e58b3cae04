// Fused LM head + cross-entropy, chunked over tokens. Chunks run in order; within a chunk rows
// are independent, and the per-token losses are summed in token order (deterministic).
#include "kernels/lm_head_loss.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/common.h"
#include "kernels/matmul.h"

namespace mt::cpu {
namespace {

// Turns one row of logits into its loss and, when `backward`, into
// dlogits = (softmax - onehot(target)) * grad_scale in place (the row is scratch either way).
// Returns the loss; 0 for an ignored target (< 0, or >= V, which callers should have refused).
// With a soft cap the row is capped first, and d(logits) is times the cap's slope 1 - (z/cap)^2,
// kept in a per-thread row while the softmax overwrites the logits.
template <typename T>
double softmax_row(T* logits, int V, int32_t target, bool backward, T grad_scale, T cap) {
  const bool counted = target >= 0 && target < V;
  if (!counted) {
    if (backward) std::fill(logits, logits + V, T(0));
    return 0.0;
  }
  thread_local std::vector<T> slope;
  if (cap > 0) {
    if (backward) slope.resize(size_t(V));
    for (int v = 0; v < V; ++v) logits[v] = cap * detail::fast_tanh(logits[v] / cap);
    if (backward)
      for (int v = 0; v < V; ++v) slope[size_t(v)] = T(1) - (logits[v] / cap) * (logits[v] / cap);
  }
  T mx = logits[0];
  for (int v = 1; v < V; ++v) mx = std::max(mx, logits[v]);
  const double target_logit = double(logits[target]);
  detail::exp_shifted(logits, V, mx);  // logits now hold exp(logit - max)
  double sum = 0;
  for (int v = 0; v < V; ++v) sum += double(logits[v]);
  const double loss = double(mx) + std::log(sum) - target_logit;
  if (backward) {
    const T k = T(1.0 / sum) * grad_scale;
    for (int v = 0; v < V; ++v) logits[v] *= k;
    logits[target] -= grad_scale;
    if (cap > 0)
      for (int v = 0; v < V; ++v) logits[v] *= slope[size_t(v)];
  }
  return loss;
}


// One chunk's rows of logits through softmax_row (in parallel), then their losses summed in token
// order into res (deterministic) and written to losses (if given).
template <typename T, typename L>
void chunk_losses(LmHeadLossResult& res, T* logits, int rows, int V, const int32_t* targets, bool backward,
                  T grad_scale, T cap, std::vector<double>& row_loss, L* losses) {
  MT_OMP(parallel for schedule(static) if (detail::worth_parallel(long(rows) * V)))
  for (int r = 0; r < rows; ++r)
    row_loss[r] = softmax_row(logits + long(r) * V, V, targets[r], backward, grad_scale, cap);
  for (int r = 0; r < rows; ++r) {
    if (targets[r] >= 0 && targets[r] < V) {
      res.loss_sum += row_loss[r];
      ++res.counted;
    }
    if (losses != nullptr) losses[r] = L(row_loss[r]);
  }
}

}  // namespace

template <typename T>
LmHeadLossResult lm_head_loss(T* dx, T* dW, T* losses, const T* x, const T* W,
                              const int32_t* targets, int N, int C, int V, int chunk,
                              T grad_scale, T* scratch, float softcap) {
  LmHeadLossResult res;
  const bool backward = dx != nullptr;
  chunk = std::max(1, chunk);
  std::vector<double> row_loss(size_t(std::min(chunk, std::max(N, 1))));
  for (int n0 = 0; n0 < N; n0 += chunk) {
    const int rows = std::min(chunk, N - n0);
    const T* xc = x + long(n0) * C;
    gemm(false, true, rows, V, C, T(1), xc, C, W, C, T(0), scratch, V);
    chunk_losses(res, scratch, rows, V, targets + n0, backward, grad_scale, T(softcap), row_loss,
                 losses ? losses + n0 : nullptr);
    if (!backward) continue;
    gemm(false, false, rows, C, V, T(1), scratch, V, W, C, T(0), dx + long(n0) * C, C);
    if (dW != nullptr) gemm(true, false, V, C, rows, T(1), scratch, V, xc, C, T(1), dW, C);
  }
  return res;
}

LmHeadLossResult lm_head_loss(bf16* dx, float* dW, float* losses, const bf16* x, const bf16* W,
                              const int32_t* targets, int N, int C, int V, int chunk, float grad_scale,
                              void* scratch, float softcap) {
  LmHeadLossResult res;
  const bool backward = dx != nullptr;
  chunk = std::max(1, chunk);
  float* logits = static_cast<float*>(scratch);
  bf16* dlogits = reinterpret_cast<bf16*>(logits + size_t(chunk) * size_t(V));
  std::vector<double> row_loss(size_t(std::min(chunk, std::max(N, 1))));
  std::vector<float> dx_chunk(backward ? size_t(std::min(chunk, std::max(N, 1))) * size_t(C) : 0);
  for (int n0 = 0; n0 < N; n0 += chunk) {
    const int rows = std::min(chunk, N - n0);
    const bf16* xc = x + long(n0) * C;
    gemm_bf16(false, true, rows, V, C, 1.0f, xc, C, W, C, 0.0f, logits, V);
    chunk_losses(res, logits, rows, V, targets + n0, backward, grad_scale, softcap, row_loss,
                 losses ? losses + n0 : nullptr);
    if (!backward) continue;
    const size_t n = size_t(rows) * size_t(V);
    MT_OMP(parallel for schedule(static) if (detail::worth_parallel(long(n))))
    for (size_t i = 0; i < n; ++i) dlogits[i] = float_to_bf16(logits[i]);
    gemm_bf16(false, false, rows, C, V, 1.0f, dlogits, V, W, C, 0.0f, dx_chunk.data(), C);
    bf16* dxc = dx + long(n0) * C;
    round_to_bf16(dxc, dx_chunk.data(), size_t(rows) * size_t(C));
    if (dW != nullptr) gemm_bf16(true, false, V, C, rows, 1.0f, dlogits, V, xc, C, 1.0f, dW, C);
  }
  return res;
}

#define MT_INSTANTIATE(T)                                                                   \
  template LmHeadLossResult lm_head_loss<T>(T*, T*, T*, const T*, const T*, const int32_t*, \
                                            int, int, int, int, T, T*, float);
MT_INSTANTIATE(float)
MT_INSTANTIATE(double)
#undef MT_INSTANTIATE

}  // namespace mt::cpu

// Mixture-of-experts routing and the token permutation around the experts (transformers'
// MixtralSparseMoeBlock, Qwen2/3-MoE, gpt-oss). N tokens, E experts, each token sent to k of them:
//   logits [N, E]    the router's scores (x W_r^T [+ b_r]), compute dtype T
//   idx [N, k]       the chosen experts, best first (ties: the lower index)
//   w [N, k]         their combine weights (acc dtype A: fp32, or double in gradient checks)
//   rows [N*k]       the slots t*k + j grouped by expert (ascending), ascending within an expert
//   offsets [E + 1]  expert e's slots are rows[offsets[e] .. offsets[e + 1])
// An expert's tokens are gathered (moe_gather), run through its MLP as one GEMM, and added back
// weighted (moe_scatter); a token's k contributions arrive in ascending expert order.
#pragma once
#include <cstdint>

namespace mt {

// How a router turns logits into the k experts and their weights:
//  kSoftmaxTopK  p = softmax(logits) over all experts; the k largest p; w = p, or p / (sum of
//                the k) when renormalised (Mixtral always; Qwen's norm_topk_prob)
//  kTopKSoftmax  the k largest logits; w = softmax over those k (gpt-oss)
enum class RouterKind { kSoftmaxTopK, kTopKSoftmax };

struct RouterShape {
  int N = 0, E = 0, k = 0;
  RouterKind kind = RouterKind::kSoftmaxTopK;
  bool renormalize = false;
};

}  // namespace mt

namespace mt::cpu {

// idx and w are overwritten. stats (nullptr: not kept) [2E] accumulates (+=) the load-balancing
// loss's statistics: stats[e] the slots routed to e, stats[E + e] the sum of softmax(logits)[e]
// over the tokens (the full softmax, whatever the router kind).
template <typename T, typename A>
void moe_route_forward(int32_t* idx, A* w, A* stats, const T* logits, const RouterShape& s);

// dlogits [N, E] is overwritten: d(loss)/d(logits) from dw [N, k] = d(loss)/d(w), through the
// router's selection and softmax; plus, when counts (nullptr: none) is given, the load-balancing
// loss's gradient, d(loss)/d(softmax(logits)[t, e]) = aux_scale * counts[e] for every token.
template <typename T, typename A>
void moe_route_backward(T* dlogits, const A* dw, const T* logits, const int32_t* idx, const A* w, const A* counts,
                        A aux_scale, const RouterShape& s);

// rows and offsets (above) from idx; a counting sort, stable.
void moe_sort(int32_t* rows, int32_t* offsets, const int32_t* idx, int N, int E, int k);

// out [n, C] = x[rows[i] / k] for i < n (overwritten).
template <typename T>
void moe_gather(T* out, const T* x, const int32_t* rows, int n, int C, int k);

// out[rows[i] / k] += w[rows[i]] * y[i] for i < n, in order (w nullptr: += y[i]).
template <typename T, typename A>
void moe_scatter(T* out, const T* y, const int32_t* rows, const A* w, int n, int C, int k);

// The weighted scatter's backward, taken behind the expert's down projection y = h W^T + b so
// that y need not be recomputed. On entry, for i < n: dy[i] = dout[rows[i] / k] (gathered,
// unweighted, [n, C]) and dh[i] = dy[i] W (its gradient through W, unweighted, [n, F]). Then
// dw[rows[i]] = dh[i] . h[i] + dy[i] . b (= dout . y; b may be nullptr) is written, and dh[i]
// and dy[i] are scaled by w[rows[i]] in place: the gradients of h and y.
template <typename T, typename A>
void moe_weight_backward(A* dw, T* dh, T* dy, const T* h, const T* b, const int32_t* rows, const A* w, int n, int F,
                         int C);

// Qwen2-MoE's shared expert gate: out[t] += sigmoid(g[t]) * y[t] for t < N (y, out [N, C]; g [N]).
template <typename T>
void sigmoid_gate_forward(T* out, const T* y, const T* g, int N, int C);
// dy = sigmoid(g) * dout and dg = sigmoid'(g) (dout . y), both overwritten.
template <typename T>
void sigmoid_gate_backward(T* dy, T* dg, const T* dout, const T* y, const T* g, int N, int C);

}  // namespace mt::cpu

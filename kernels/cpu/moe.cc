// Mixture-of-experts routing and permutation (kernels/moe.h): the reference, token by token in
// order (the router is N x E work, small beside the experts' GEMMs; a fixed order keeps the
// load-balancing statistics' sums deterministic).
#include "kernels/moe.h"

#include "kernels/bf16.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mt::cpu {
namespace {

// softmax(logits) of one token into p (the accumulator type).
template <typename T, typename A>
void softmax_row(A* p, const T* logits, int E) {
  A m = A(logits[0]);
  for (int e = 1; e < E; ++e) m = std::max(m, A(logits[e]));
  A sum = 0;
  for (int e = 0; e < E; ++e) sum += p[e] = std::exp(A(logits[e]) - m);
  for (int e = 0; e < E; ++e) p[e] /= sum;
}

// The k largest of key[0..E), best first; ties go to the lower index.
template <typename A>
void top_k(int32_t* idx, const A* key, int E, int k) {
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int e = 0; e < E; ++e) {
      bool taken = false;
      for (int i = 0; i < j; ++i) taken = taken || idx[i] == e;
      if (!taken && (best < 0 || key[e] > key[best])) best = e;
    }
    idx[j] = best;
  }
}

// d(loss)/d(logits) += p (g - p . g): the softmax's backward for an upstream gradient g.
template <typename A>
void softmax_backward_add(A* dl, const A* p, const A* g, int E) {
  A dot = 0;
  for (int e = 0; e < E; ++e) dot += p[e] * g[e];
  for (int e = 0; e < E; ++e) dl[e] += p[e] * (g[e] - dot);
}

}  // namespace

template <typename T, typename A>
void moe_route_forward(int32_t* idx, A* w, A* stats, const T* logits, const RouterShape& s) {
  const int E = s.E, k = s.k;
  std::vector<A> p(static_cast<size_t>(E)), key(static_cast<size_t>(E));
  for (int t = 0; t < s.N; ++t) {
    const T* l = logits + size_t(t) * E;
    int32_t* id = idx + size_t(t) * k;
    A* wt = w + size_t(t) * k;
    softmax_row(p.data(), l, E);
    const bool by_prob = s.kind == RouterKind::kSoftmaxTopK;
    for (int e = 0; e < E; ++e) key[size_t(e)] = by_prob ? p[size_t(e)] : A(l[e]);
    top_k(id, key.data(), E, k);
    if (by_prob) {
      A sum = 0;
      for (int j = 0; j < k; ++j) sum += wt[j] = p[size_t(id[j])];
      if (s.renormalize)
        for (int j = 0; j < k; ++j) wt[j] /= sum;
    } else {  // softmax over the k chosen logits (the first is their maximum)
      A sum = 0;
      for (int j = 0; j < k; ++j) sum += wt[j] = std::exp(A(l[id[j]]) - A(l[id[0]]));
      for (int j = 0; j < k; ++j) wt[j] /= sum;
    }
    if (!stats) continue;
    for (int j = 0; j < k; ++j) stats[id[j]] += A(1);
    for (int e = 0; e < E; ++e) stats[E + e] += p[size_t(e)];
  }
}

template <typename T, typename A>
void moe_route_backward(T* dlogits, const A* dw, const T* logits, const int32_t* idx, const A* w, const A* counts,
                        A aux_scale, const RouterShape& s) {
  const int E = s.E, k = s.k;
  const size_t n = static_cast<size_t>(E);
  std::vector<A> p(n), g(n), dl(n);
  for (int t = 0; t < s.N; ++t) {
    const T* l = logits + size_t(t) * E;
    const int32_t* id = idx + size_t(t) * k;
    const A* wt = w + size_t(t) * k;
    const A* dwt = dw + size_t(t) * k;
    softmax_row(p.data(), l, E);
    std::fill(g.begin(), g.end(), A(0));
    std::fill(dl.begin(), dl.end(), A(0));
    A dot = 0;  // sum_j w_j dw_j
    for (int j = 0; j < k; ++j) dot += wt[j] * dwt[j];
    if (s.kind == RouterKind::kSoftmaxTopK) {  // w_j = p_j (/ S): d/dp_j = dw_j (or (dw_j - w.dw) / S)
      A sum = 0;
      for (int j = 0; j < k; ++j) sum += p[size_t(id[j])];
      for (int j = 0; j < k; ++j) g[size_t(id[j])] += s.renormalize ? (dwt[j] - dot) / sum : dwt[j];
    } else {  // w = softmax(chosen logits): d/dl_j = w_j (dw_j - w.dw)
      for (int j = 0; j < k; ++j) dl[size_t(id[j])] += wt[j] * (dwt[j] - dot);
    }
    if (counts)
      for (int e = 0; e < E; ++e) g[size_t(e)] += aux_scale * counts[e];
    softmax_backward_add(dl.data(), p.data(), g.data(), E);
    for (int e = 0; e < E; ++e) dlogits[size_t(t) * E + e] = T(dl[size_t(e)]);
  }
}

void moe_sort(int32_t* rows, int32_t* offsets, const int32_t* idx, int N, int E, int k) {
  for (int e = 0; e <= E; ++e) offsets[e] = 0;
  for (int i = 0; i < N * k; ++i) ++offsets[idx[i] + 1];
  for (int e = 0; e < E; ++e) offsets[e + 1] += offsets[e];
  std::vector<int32_t> next(offsets, offsets + E);
  for (int i = 0; i < N * k; ++i) rows[next[size_t(idx[i])]++] = i;
}

template <typename T>
void moe_gather(T* out, const T* x, const int32_t* rows, int n, int C, int k) {
  for (int i = 0; i < n; ++i) std::copy_n(x + size_t(rows[i] / k) * C, C, out + size_t(i) * C);
}

template <typename T, typename A>
void moe_scatter(T* out, const T* y, const int32_t* rows, const A* w, int n, int C, int k) {
  for (int i = 0; i < n; ++i) {
    T* o = out + size_t(rows[i] / k) * C;
    const T* yi = y + size_t(i) * C;
    if (w) {
      const T wi = T(w[rows[i]]);
      for (int c = 0; c < C; ++c) o[c] += wi * yi[c];
    } else {
      for (int c = 0; c < C; ++c) o[c] += yi[c];
    }
  }
}

template <typename T, typename A>
void moe_weight_backward(A* dw, T* dh, T* dy, const T* h, const T* b, const int32_t* rows, const A* w, int n, int F,
                         int C) {
  for (int i = 0; i < n; ++i) {
    T* dhi = dh + size_t(i) * F;
    T* dyi = dy + size_t(i) * C;
    const T* hi = h + size_t(i) * F;
    A dot = 0;
    for (int f = 0; f < F; ++f) dot += A(dhi[f]) * A(hi[f]);
    if (b)
      for (int c = 0; c < C; ++c) dot += A(dyi[c]) * A(b[c]);
    dw[rows[i]] = dot;
    const T wi = T(w[rows[i]]);
    for (int f = 0; f < F; ++f) dhi[f] *= wi;
    for (int c = 0; c < C; ++c) dyi[c] *= wi;
  }
}

template <typename T>
void sigmoid_gate_forward(T* out, const T* y, const T* g, int N, int C) {
  for (int t = 0; t < N; ++t) {
    const T s = T(1) / (T(1) + std::exp(-g[t]));
    for (int c = 0; c < C; ++c) out[size_t(t) * C + c] += s * y[size_t(t) * C + c];
  }
}

template <typename T>
void sigmoid_gate_backward(T* dy, T* dg, const T* dout, const T* y, const T* g, int N, int C) {
  for (int t = 0; t < N; ++t) {
    const T s = T(1) / (T(1) + std::exp(-g[t]));
    T dot = 0;
    for (int c = 0; c < C; ++c) {
      const size_t i = size_t(t) * C + c;
      dy[i] = s * dout[i];
      dot += dout[i] * y[i];
    }
    dg[t] = s * (T(1) - s) * dot;
  }
}

#define MT_INSTANTIATE(T)                                                                                          \
  template void moe_route_forward<T, T>(int32_t*, T*, T*, const T*, const RouterShape&);                          \
  template void moe_route_backward<T, T>(T*, const T*, const T*, const int32_t*, const T*, const T*, T,            \
                                         const RouterShape&);                                                      \
  template void moe_gather<T>(T*, const T*, const int32_t*, int, int, int);                                        \
  template void moe_scatter<T, T>(T*, const T*, const int32_t*, const T*, int, int, int);                          \
  template void moe_weight_backward<T, T>(T*, T*, T*, const T*, const T*, const int32_t*, const T*, int, int, int); \
  template void sigmoid_gate_forward<T>(T*, const T*, const T*, int, int);                                         \
  template void sigmoid_gate_backward<T>(T*, T*, const T*, const T*, const T*, int, int);
MT_INSTANTIATE(float)
MT_INSTANTIATE(double)
#undef MT_INSTANTIATE
template void moe_gather<bf16>(bf16*, const bf16*, const int32_t*, int, int, int);

}  // namespace mt::cpu

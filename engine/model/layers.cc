#include "engine/model/layers.h"

#include <algorithm>
#include <cstdint>

namespace mt {

namespace {
struct Dims {
  size_t N, C, QKV, Q, F, H, T, M;  // M: tokens per MLP chunk
};
Dims dims(const LayerShape& s) {
  const ModelConfig& c = *s.cfg;
  return {size_t(s.N()), size_t(c.hidden_size), size_t(c.qkv_dim()), size_t(c.q_dim()),
          size_t(c.intermediate_size), size_t(c.num_heads), size_t(s.T), size_t(s.chunk())};
}
// Walks a workspace layout: take<U>(n, scope) returns the next kWorkspaceAlign-aligned region
// of n Us. With a null base it only counts (the *_bytes functions); the binds carve a real base.
// Each region's aligned size is booked to its scope: a whole micro-batch's tokens (kSequence:
// grows with T) or one chunk's (kChunk: fixed by token_chunk), so split() sums to bytes().
class Carver {
 public:
  enum Scope { kSequence, kChunk };
  explicit Carver(void* base) : base_(reinterpret_cast<uintptr_t>(base)) {}
  template <typename U>
  U* take(size_t n, Scope scope) {
    U* p = base_ ? reinterpret_cast<U*>(base_ + off_) : nullptr;
    const size_t bytes = align(n * sizeof(U));
    off_ += bytes;
    (scope == kSequence ? split_.sequence : split_.chunk) += bytes;
    return p;
  }
  size_t bytes() const { return off_; }
  WorkspaceSplit split() const { return split_; }

 private:
  static size_t align(size_t b) { return (b + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; }
  uintptr_t base_;
  size_t off_ = 0;
  WorkspaceSplit split_;
};

// The attention block's tensors span the micro-batch (attention reads every token's q, k, v);
// the norms' outputs and the MLP's run one chunk at a time (LayerShape::token_chunk).
template <typename T>
DecoderActs<T> carve_decoder_acts(const LayerShape& s, Carver& c) {
  using A = acc_t<T>;
  constexpr auto kSeq = Carver::kSequence, kChunk = Carver::kChunk;
  const Dims d = dims(s);
  DecoderActs<T> a{};
  a.xn1 = c.take<T>(d.M * d.C, kChunk);
  a.rstd1 = c.take<A>(d.N, kSeq);
  a.qkv = c.take<T>(d.N * d.QKV, kSeq);
  a.att = c.take<T>(d.N * d.Q, kSeq);
  a.lse = c.take<A>(d.N * d.H, kSeq);
  a.x2 = c.take<T>(d.N * d.C, kSeq);
  a.xn2 = c.take<T>(d.M * d.C, kChunk);
  a.rstd2 = c.take<A>(d.M, kChunk);
  a.gu = c.take<T>(d.M * 2 * d.F, kChunk);
  a.h = c.take<T>(d.M * d.F, kChunk);
  return a;
}

template <typename T>
DecoderScratch<T> carve_decoder_scratch(const LayerShape& s, Carver& c) {
  constexpr auto kSeq = Carver::kSequence, kChunk = Carver::kChunk;
  const Dims d = dims(s);
  DecoderScratch<T> sc{};
  sc.dh = c.take<T>(d.M * d.F, kChunk);
  sc.dgu = c.take<T>(d.M * 2 * d.F, kChunk);
  sc.dxn = c.take<T>(d.M * d.C, kChunk);
  sc.datt = c.take<T>(d.N * d.Q, kSeq);
  sc.dqkv = c.take<T>(d.N * d.QKV, kSeq);
  return sc;
}

// The head's norm runs over the micro-batch (its logits are chunked by head_chunk inside
// lm_head_loss).
template <typename T>
HeadScratch<T> carve_head_scratch(const LayerShape& s, Carver& c) {
  constexpr auto kSeq = Carver::kSequence, kChunk = Carver::kChunk;
  const size_t N = size_t(s.N()), C = size_t(s.cfg->hidden_size);
  HeadScratch<T> sc{};
  sc.xn = c.take<T>(N * C, kSeq);
  sc.rstd = c.take<acc_t<T>>(N, kSeq);
  sc.dxn = c.take<T>(N * C, kSeq);
  sc.logits = c.take<char>(lm_head_scratch_bytes<T>(s.head_chunk, s.cfg->vocab_size), kChunk);
  return sc;
}

}  // namespace

namespace {
// A layout's size: the carve run on a counting Carver.
template <typename Carve>
size_t layout_bytes(const LayerShape& s, Carve carve) {
  Carver c(nullptr);
  carve(s, c);
  return c.bytes();
}
template <typename Carve>
auto bind_layout(const LayerShape& s, void* base, Carve carve) {
  Carver c(base);
  return carve(s, c);
}
}  // namespace

template <typename T>
WorkspaceSplit layer_workspace_split(const LayerShape& s) {
  Carver c(nullptr);
  carve_decoder_acts<T>(s, c);
  carve_decoder_scratch<T>(s, c);
  carve_head_scratch<T>(s, c);
  return c.split();
}

template <typename T>
size_t decoder_acts_bytes(const LayerShape& s) { return layout_bytes(s, carve_decoder_acts<T>); }
template <typename T>
DecoderActs<T> bind_decoder_acts(const LayerShape& s, void* base) { return bind_layout(s, base, carve_decoder_acts<T>); }
template <typename T>
size_t decoder_scratch_bytes(const LayerShape& s) { return layout_bytes(s, carve_decoder_scratch<T>); }
template <typename T>
DecoderScratch<T> bind_decoder_scratch(const LayerShape& s, void* base) {
  return bind_layout(s, base, carve_decoder_scratch<T>);
}
template <typename T>
size_t head_scratch_bytes(const LayerShape& s) { return layout_bytes(s, carve_head_scratch<T>); }
template <typename T>
HeadScratch<T> bind_head_scratch(const LayerShape& s, void* base) { return bind_layout(s, base, carve_head_scratch<T>); }

namespace {

// The MLP block's forward on tokens [n0, n0 + n): xn2, rstd2, gu, h hold that chunk;
// out (when given) receives x2 + down(silu(gate) * up) for it.
template <typename T>
void mlp_forward(const Ops<T>& ops, const LayerShape& s, const DecoderView<const T>& w, const DecoderActs<T>& a,
                 int n0, int n, T* out) {
  const ModelConfig& c = *s.cfg;
  const int C = c.hidden_size, F = c.intermediate_size;
  const T* x2 = a.x2 + size_t(n0) * C;
  ops.rmsnorm_forward(a.xn2, a.rstd2, x2, w.ln2, n, C, float(c.rms_norm_eps));
  ops.matmul_forward(a.gu, a.xn2, w.wgu, nullptr, n, C, 2 * F);
  ops.swiglu_forward(a.h, a.gu, n, F);
  if (!out) return;
  T* o = out + size_t(n0) * C;
  ops.matmul_forward(o, a.h, w.wdown, nullptr, n, F, C);
  ops.add_inplace(o, x2, size_t(n) * C);
}

// The MLP block's backward on tokens [n0, n0 + n), whose activations are in `a`: dw accumulates,
// and dresid's rows n0.. (dL/dout) become dL/dx2 = dL/dout + d(norm2 input), in place.
template <typename T>
void mlp_backward(const Ops<T>& ops, const LayerShape& s, const DecoderView<const T>& w,
                  const DecoderView<acc_t<T>>& dw, const DecoderActs<T>& a, T* dresid,
                  const DecoderScratch<T>& sc, int n0, int n) {
  const ModelConfig& c = *s.cfg;
  const int C = c.hidden_size, F = c.intermediate_size;
  const size_t off = size_t(n0) * C, nC = size_t(n) * C;
  ops.zero(sc.dh, size_t(n) * F);
  ops.matmul_backward(sc.dh, dw.wdown, nullptr, dresid + off, a.h, w.wdown, n, F, C);
  ops.swiglu_backward(sc.dgu, sc.dh, a.gu, n, F);
  ops.zero(sc.dxn, nC);
  ops.matmul_backward(sc.dxn, dw.wgu, nullptr, sc.dgu, a.xn2, w.wgu, n, C, 2 * F);
  ops.rmsnorm_backward(dresid + off, dw.ln2, sc.dxn, a.x2 + off, w.ln2, a.rstd2, n, C);
}

// norm1 and the QKV projection on tokens [n0, n0 + n): xn1 holds the chunk, qkv its rows.
template <typename T>
void qkv_forward(const Ops<T>& ops, const LayerShape& s, const DecoderView<const T>& w, const T* x,
                 const DecoderActs<T>& a, int n0, int n) {
  const ModelConfig& c = *s.cfg;
  const int C = c.hidden_size;
  ops.rmsnorm_forward(a.xn1, a.rstd1 + n0, x + size_t(n0) * C, w.ln1, n, C, float(c.rms_norm_eps));
  ops.matmul_forward(a.qkv + size_t(n0) * c.qkv_dim(), a.xn1, w.wqkv, w.bqkv, n, C, c.qkv_dim());
}

// The QKV projection's and norm1's backward on tokens [n0, n0 + n) (xn1 holding the chunk):
// dw accumulates, dresid's rows n0.. (dL/dx2) become dL/dx, in place.
template <typename T>
void qkv_backward(const Ops<T>& ops, const LayerShape& s, const DecoderView<const T>& w,
                  const DecoderView<acc_t<T>>& dw, const T* x, const DecoderActs<T>& a, T* dresid,
                  const DecoderScratch<T>& sc, int n0, int n) {
  const ModelConfig& c = *s.cfg;
  const int C = c.hidden_size, QKV = c.qkv_dim();
  const size_t off = size_t(n0) * C;
  ops.zero(sc.dxn, size_t(n) * C);
  ops.matmul_backward(sc.dxn, dw.wqkv, dw.bqkv, sc.dqkv + size_t(n0) * QKV, a.xn1, w.wqkv, n, C, QKV);
  ops.rmsnorm_backward(dresid + off, dw.ln1, sc.dxn, x + off, w.ln1, a.rstd1 + n0, n, C);
}

}  // namespace

template <typename T>
void decoder_forward(const Ops<T>& ops, const LayerShape& s, const DecoderView<const T>& w, const T* x,
                     T* out, const DecoderActs<T>& a) {
  const ModelConfig& c = *s.cfg;
  const int N = s.N(), C = c.hidden_size, M = s.chunk();
  // attention block: x2 = x + o_proj(attn(rope(qkv(norm(x))))), the norm and projection chunk by
  // chunk (attention itself needs every token's q, k and v)
  for (int n0 = 0; n0 < N; n0 += M) qkv_forward(ops, s, w, x, a, n0, std::min(M, N - n0));
  ops.rope_forward(a.qkv, s.inv_freq, s.pos, s.B, s.T, c.num_heads, c.num_kv_heads, c.head_dim,
                   float(c.rope_attention_factor));
  ops.attention_forward(a.att, a.lse, a.qkv, s.documents(), s.B, s.T, c.num_heads, c.num_kv_heads, c.head_dim);
  ops.matmul_forward(a.x2, a.att, w.wo, nullptr, N, c.q_dim(), C);
  ops.add_inplace(a.x2, x, size_t(N) * C);
  // MLP block: out = x2 + down(silu(gate(norm(x2))) * up(norm(x2))), chunk by chunk. A recompute
  // for backward (out == nullptr) of a chunked block stops here: the backward recomputes each
  // chunk; unchunked, the acts it leaves are what the backward reads.
  if (!out && s.chunked()) return;
  for (int n0 = 0; n0 < N; n0 += M) mlp_forward(ops, s, w, a, n0, std::min(M, N - n0), out);
}

template <typename T>
void decoder_backward(const Ops<T>& ops, const LayerShape& s, const DecoderView<const T>& w,
                      const DecoderView<acc_t<T>>& dw, const T* x, const DecoderActs<T>& a, T* dresid,
                      const DecoderScratch<T>& sc) {
  const ModelConfig& c = *s.cfg;
  const int N = s.N(), Q = c.q_dim(), C = c.hidden_size, M = s.chunk();
  // MLP block, chunk by chunk (a chunked block first recomputes the chunk's activations);
  // dresid becomes dL/dx2
  for (int n0 = 0; n0 < N; n0 += M) {
    const int n = std::min(M, N - n0);
    if (s.chunked()) mlp_forward(ops, s, w, a, n0, n, static_cast<T*>(nullptr));
    mlp_backward(ops, s, w, dw, a, dresid, sc, n0, n);
  }
  // attention block; then the QKV projection and norm1 chunk by chunk (a chunked block first
  // recomputes the chunk's norm), dresid becoming dL/dx
  ops.zero(sc.datt, size_t(N) * Q);
  ops.matmul_backward(sc.datt, dw.wo, nullptr, dresid, a.att, w.wo, N, Q, C);
  ops.attention_backward(sc.dqkv, sc.datt, a.qkv, a.att, a.lse, s.documents(), s.B, s.T, c.num_heads, c.num_kv_heads,
                         c.head_dim);
  ops.rope_backward(sc.dqkv, s.inv_freq, s.pos, s.B, s.T, c.num_heads, c.num_kv_heads, c.head_dim,
                    float(c.rope_attention_factor));
  for (int n0 = 0; n0 < N; n0 += M) {
    const int n = std::min(M, N - n0);
    if (s.chunked())
      ops.rmsnorm_forward(a.xn1, a.rstd1 + n0, x + size_t(n0) * C, w.ln1, n, C, float(c.rms_norm_eps));
    qkv_backward(ops, s, w, dw, x, a, dresid, sc, n0, n);
  }
}

template <typename T>
void embedding_forward(const Ops<T>& ops, const LayerShape& s, const T* wte, const int32_t* tokens, T* out) {
  ops.embedding_forward(out, tokens, wte, s.N(), s.cfg->hidden_size);
}

template <typename T>
void embedding_backward(const Ops<T>& ops, const LayerShape& s, acc_t<T>* dwte, const int32_t* tokens, const T* dx) {
  ops.embedding_backward(dwte, dx, tokens, s.N(), s.cfg->hidden_size);
}

template <typename T>
void head_forward_backward(const Ops<T>& ops, const LayerShape& s, const T* norm_w, const T* lm, acc_t<T>* dnorm_w,
                           acc_t<T>* dlm, const T* x, const int32_t* targets, acc_t<T> grad_scale, T* dx,
                           const HeadScratch<T>& sc, double* loss_totals) {
  const ModelConfig& c = *s.cfg;
  const int N = s.N(), C = c.hidden_size;
  ops.rmsnorm_forward(sc.xn, sc.rstd, x, norm_w, N, C, float(c.rms_norm_eps));
  ops.lm_head_loss(dx ? sc.dxn : nullptr, dlm, nullptr, sc.xn, lm, targets, N, C, c.vocab_size, s.head_chunk,
                   grad_scale, sc.logits, loss_totals);
  if (dx) {
    ops.zero(dx, size_t(N) * C);
    ops.rmsnorm_backward(dx, dnorm_w, sc.dxn, x, norm_w, sc.rstd, N, C);
  }
}

#define MT_INSTANTIATE_LAYERS(T)                                                                          \
  template size_t decoder_acts_bytes<T>(const LayerShape&);                                              \
  template size_t decoder_scratch_bytes<T>(const LayerShape&);                                           \
  template size_t head_scratch_bytes<T>(const LayerShape&);                                              \
  template DecoderActs<T> bind_decoder_acts(const LayerShape&, void*);                                   \
  template DecoderScratch<T> bind_decoder_scratch(const LayerShape&, void*);                             \
  template HeadScratch<T> bind_head_scratch(const LayerShape&, void*);                                   \
  template WorkspaceSplit layer_workspace_split<T>(const LayerShape&);                                   \
  template void decoder_forward(const Ops<T>&, const LayerShape&, const DecoderView<const T>&, const T*, \
                                T*, const DecoderActs<T>&);                                              \
  template void decoder_backward(const Ops<T>&, const LayerShape&, const DecoderView<const T>&,          \
                                 const DecoderView<acc_t<T>>&, const T*, const DecoderActs<T>&, T*,      \
                                 const DecoderScratch<T>&);                                              \
  template void embedding_forward(const Ops<T>&, const LayerShape&, const T*, const int32_t*, T*);       \
  template void embedding_backward(const Ops<T>&, const LayerShape&, acc_t<T>*, const int32_t*, const T*); \
  template void head_forward_backward(const Ops<T>&, const LayerShape&, const T*, const T*, acc_t<T>*,   \
                                      acc_t<T>*, const T*, const int32_t*, acc_t<T>, T*,                 \
                                      const HeadScratch<T>&, double*);
MT_INSTANTIATE_LAYERS(float)
MT_INSTANTIATE_LAYERS(double)
MT_INSTANTIATE_LAYERS(bf16)
#undef MT_INSTANTIATE_LAYERS

}  // namespace mt

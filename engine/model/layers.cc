#include "engine/model/layers.h"

#include <algorithm>
#include <cstdint>

namespace mt {

namespace {
struct Dims {
  size_t N, C, QKV, Q, F, H, T, M;  // F: the widest dense MLP (0: none); M: tokens per MLP chunk
  size_t E, K, FE;                  // experts, experts per token, an expert's width (0: dense model)
};
Dims dims(const LayerShape& s) {
  const ModelConfig& c = *s.cfg;
  return {size_t(s.N()),         size_t(c.hidden_size), size_t(c.qkv_dim()),      size_t(c.q_dim()),
          size_t(c.max_dense_ffn()), size_t(c.num_heads),   size_t(s.T),              size_t(s.chunk()),
          size_t(c.moe.num_experts), size_t(c.moe.top_k),   size_t(c.moe.expert_ffn)};
}
RouterShape router_shape(const LayerShape& s) {
  const MoeConfig& m = s.cfg->moe;
  return {s.N(), m.num_experts, m.top_k, m.router, m.renormalize};
}
QkNormShape qk_norm_shape(const LayerShape& s) {
  const ModelConfig& c = *s.cfg;
  return {s.N(), c.num_heads, c.num_kv_heads, c.head_dim, c.qk_norm == QkNorm::kPerHead};
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
  template <typename U>
  U* take_if(bool present, size_t n, Scope scope) {
    return present ? take<U>(n, scope) : nullptr;
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
// A family's variants add regions (the q/k norms' input, the post-norms' inputs); regions a
// family does not have take no bytes and bind to nullptr.
template <typename T>
DecoderActs<T> carve_decoder_acts(const LayerShape& s, Carver& c) {
  using A = acc_t<T>;
  constexpr auto kSeq = Carver::kSequence, kChunk = Carver::kChunk;
  const Dims d = dims(s);
  const ModelConfig& m = *s.cfg;
  const bool pre = m.pre_norms(), post = m.post_norms(), qk = m.qk_norm != QkNorm::kNone;
  const size_t qk_vectors = qk ? size_t(qk_norm_shape(s).vectors()) : 0;
  // An MoE layer normalises the whole micro-batch at once (its router and experts read every
  // token); its shared expert's output waits for the gate in mo.
  const bool moe = m.has_experts(), mlp = d.F > 0, mo = post || (moe && m.moe.shared_ffn > 0);
  DecoderActs<T> a{};
  a.xn1 = c.take_if<T>(pre, d.M * d.C, kChunk);
  a.rstd1 = c.take_if<A>(pre, d.N, kSeq);
  a.qkv_raw = c.take_if<T>(qk, d.N * d.QKV, kSeq);
  a.qk_rstd = c.take_if<A>(qk, d.N * qk_vectors, kSeq);
  a.qkv = c.take<T>(d.N * d.QKV, kSeq);
  a.att = c.take<T>(d.N * d.Q, kSeq);
  a.lse = c.take<A>(d.N * d.H, kSeq);
  a.ao = c.take_if<T>(post, d.N * d.C, kSeq);
  a.ao_rstd = c.take_if<A>(post, d.N, kSeq);
  a.x2 = c.take<T>(d.N * d.C, kSeq);
  a.xn2 = c.take_if<T>(pre, d.M * d.C, kChunk);
  a.rstd2 = c.take_if<A>(pre, moe ? d.N : d.M, moe ? kSeq : kChunk);
  a.gu = c.take_if<T>(mlp, d.M * 2 * d.F, kChunk);
  a.h = c.take_if<T>(mlp, d.M * d.F, kChunk);
  a.mo = c.take_if<T>(mo, d.M * d.C, kChunk);
  a.mo_rstd = c.take_if<A>(post, d.M, kChunk);
  return a;
}

template <typename T>
DecoderScratch<T> carve_decoder_scratch(const LayerShape& s, Carver& c) {
  constexpr auto kSeq = Carver::kSequence, kChunk = Carver::kChunk;
  const Dims d = dims(s);
  const bool post = s.cfg->post_norms(), qk = s.cfg->qk_norm != QkNorm::kNone, moe = d.E > 0;
  const bool mo = post || (moe && s.cfg->moe.shared_ffn > 0);
  DecoderScratch<T> sc{};
  sc.dh = c.take_if<T>(d.F > 0, d.M * d.F, kChunk);
  sc.dgu = c.take_if<T>(d.F > 0, d.M * 2 * d.F, kChunk);
  sc.dxn = c.take<T>(d.M * d.C, kChunk);
  sc.dmo = c.take_if<T>(mo, d.M * d.C, kChunk);
  sc.dao = c.take_if<T>(post, d.N * d.C, kSeq);
  sc.datt = c.take<T>(d.N * d.Q, kSeq);
  sc.dqkv = c.take<T>(d.N * d.QKV, kSeq);
  sc.dqkv_raw = c.take_if<T>(qk, d.N * d.QKV, kSeq);
  ExpertScratch<T>& x = sc.expert;
  x.x = c.take_if<T>(moe, d.M * d.C, kChunk);
  x.gu = c.take_if<T>(moe, d.M * 2 * d.FE, kChunk);
  x.h = c.take_if<T>(moe, d.M * d.FE, kChunk);
  x.y = c.take_if<T>(moe, d.M * d.C, kChunk);
  x.dy = c.take_if<T>(moe, d.M * d.C, kChunk);
  x.dh = c.take_if<T>(moe, d.M * d.FE, kChunk);
  x.dgu = c.take_if<T>(moe, d.M * 2 * d.FE, kChunk);
  x.dx = c.take_if<T>(moe, d.M * d.C, kChunk);
  return sc;
}

// One micro-batch's MoE state (MoeActs): every region spans the micro-batch.
template <typename T>
MoeActs<T> carve_moe_acts(const LayerShape& s, Carver& c) {
  using A = acc_t<T>;
  constexpr auto kSeq = Carver::kSequence;
  const Dims d = dims(s);
  const bool shared = s.cfg->moe.shared_ffn > 0;
  MoeActs<T> m{};
  m.in = c.take<T>(d.N * d.C, kSeq);
  m.logits = c.take<T>(d.N * d.E, kSeq);
  m.idx = c.take<int32_t>(d.N * d.K, kSeq);
  m.w = c.take<A>(d.N * d.K, kSeq);
  m.rows = c.take<int32_t>(d.N * d.K, kSeq);
  m.offsets = c.take<int32_t>(d.E + 1, kSeq);
  m.gate = c.take_if<T>(shared, d.N, kSeq);
  m.din = c.take<T>(d.N * d.C, kSeq);
  m.dw = c.take<A>(d.N * d.K, kSeq);
  m.dlogits = c.take<T>(d.N * d.E, kSeq);
  m.dgate = c.take_if<T>(shared, d.N, kSeq);
  return m;
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
template <typename T>
size_t moe_acts_bytes(const LayerShape& s) { return s.cfg->has_experts() ? layout_bytes(s, carve_moe_acts<T>) : 0; }
template <typename T>
MoeActs<T> bind_moe_acts(const LayerShape& s, void* base) { return bind_layout(s, base, carve_moe_acts<T>); }

double moe_aux_scale(const LayerShape& s, int micro_batches) {
  const MoeConfig& m = s.cfg->moe;
  const double rows = double(s.cfg->num_moe_layers()) * s.N();
  return m.aux_coef * m.num_experts / (double(micro_batches) * rows * rows);
}

double moe_aux_loss(const LayerShape& s, const double* stats) {
  const int E = s.cfg->moe.num_experts;
  const double rows = double(s.cfg->num_moe_layers()) * s.N();
  double sum = 0;
  for (int e = 0; e < E; ++e) sum += stats[e] / rows * (stats[E + e] / rows);
  return sum * E;
}

namespace {

// The RMSNorm every norm of the model is: the config's eps and scale form.
template <typename T>
void norm_forward(const Ops<T>& ops, const ModelConfig& c, T* out, acc_t<T>* rstd, const T* in, const T* w, int n) {
  ops.rmsnorm_forward(out, rstd, in, w, n, c.hidden_size, float(c.rms_norm_eps), c.norm_offset);
}
template <typename T>
void norm_backward(const Ops<T>& ops, const ModelConfig& c, T* din, acc_t<T>* dw, const T* dout, const T* in,
                   const T* w, const acc_t<T>* rstd, int n) {
  ops.rmsnorm_backward(din, dw, dout, in, w, rstd, n, c.hidden_size, c.norm_offset);
}

// A branch's input norm backward: din (the residual's gradient) += d(branch input) from dxn.
// Without an input norm (OLMo 2) the branch read the residual stream itself.
template <typename T>
void input_norm_backward(const Ops<T>& ops, const ModelConfig& c, T* din, acc_t<T>* dw, const T* dxn, const T* in,
                         const T* w, const acc_t<T>* rstd, int n) {
  if (w) norm_backward(ops, c, din, dw, dxn, in, w, rstd, n);
  else ops.add_inplace(din, dxn, size_t(n) * c.hidden_size);
}

// The MLP block's forward on tokens [n0, n0 + n): xn2, rstd2, gu, h (and mo) hold that chunk;
// out (when given) receives x2 + [norm](down(act(gate) * up)) for it, the norm with post-norms.
// With post-norms the down projection runs even for a recompute (out == nullptr): its output
// mo is the norm's input the backward needs.
template <typename T>
void mlp_forward(const Ops<T>& ops, const LayerShape& s, const DecoderView<const T>& w, const DecoderActs<T>& a,
                 int n0, int n, T* out) {
  const ModelConfig& c = *s.cfg;
  const int C = c.hidden_size, F = c.intermediate_size;
  const T* x2 = a.x2 + size_t(n0) * C;
  const T* in = x2;
  if (w.ln2) norm_forward(ops, c, a.xn2, a.rstd2, x2, w.ln2, n), in = a.xn2;
  ops.matmul_forward(a.gu, in, w.wgu, nullptr, n, C, 2 * F);
  ops.swiglu_forward(a.h, a.gu, n, F, c.activation);
  if (w.ln_mlp_out) ops.matmul_forward(a.mo, a.h, w.wdown, nullptr, n, F, C);
  if (!out) return;
  T* o = out + size_t(n0) * C;
  if (w.ln_mlp_out) norm_forward(ops, c, o, a.mo_rstd, a.mo, w.ln_mlp_out, n);
  else ops.matmul_forward(o, a.h, w.wdown, nullptr, n, F, C);
  ops.add_inplace(o, x2, size_t(n) * C);
}

// The MLP block's backward on tokens [n0, n0 + n), whose activations are in `a`: dw accumulates,
// and dresid's rows n0.. (dL/dout) become dL/dx2 = dL/dout + d(MLP input), in place.
template <typename T>
void mlp_backward(const Ops<T>& ops, const LayerShape& s, const DecoderView<const T>& w,
                  const DecoderView<acc_t<T>>& dw, const DecoderActs<T>& a, T* dresid,
                  const DecoderScratch<T>& sc, int n0, int n) {
  const ModelConfig& c = *s.cfg;
  const int C = c.hidden_size, F = c.intermediate_size;
  const size_t off = size_t(n0) * C, nC = size_t(n) * C;
  const T* dtop = dresid + off;  // dL/d(down projection's output)
  if (w.ln_mlp_out) {
    norm_forward(ops, c, sc.dmo, a.mo_rstd, a.mo, w.ln_mlp_out, n);  // its statistics (a recompute has none)
    ops.zero(sc.dmo, nC);
    norm_backward(ops, c, sc.dmo, dw.ln_mlp_out, dresid + off, a.mo, w.ln_mlp_out, a.mo_rstd, n);
    dtop = sc.dmo;
  }
  ops.zero(sc.dh, size_t(n) * F);
  ops.matmul_backward(sc.dh, dw.wdown, nullptr, dtop, a.h, w.wdown, n, F, C);
  ops.swiglu_backward(sc.dgu, sc.dh, a.gu, n, F, c.activation);
  ops.zero(sc.dxn, nC);
  ops.matmul_backward(sc.dxn, dw.wgu, nullptr, sc.dgu, w.ln2 ? a.xn2 : a.x2 + off, w.wgu, n, C, 2 * F);
  input_norm_backward(ops, c, dresid + off, dw.ln2, sc.dxn, a.x2 + off, w.ln2, a.rstd2, n);
}

// norm1 and the QKV projection on tokens [n0, n0 + n): xn1 holds the chunk, qkv (or, with q/k
// norms, qkv_raw) its rows.
template <typename T>
void qkv_forward(const Ops<T>& ops, const LayerShape& s, const DecoderView<const T>& w, const T* x,
                 const DecoderActs<T>& a, int n0, int n) {
  const ModelConfig& c = *s.cfg;
  const int C = c.hidden_size;
  const T* in = x + size_t(n0) * C;
  if (w.ln1) norm_forward(ops, c, a.xn1, a.rstd1 + n0, in, w.ln1, n), in = a.xn1;
  T* qkv = w.qn ? a.qkv_raw : a.qkv;
  ops.matmul_forward(qkv + size_t(n0) * c.qkv_dim(), in, w.wqkv, w.bqkv, n, C, c.qkv_dim());
}

// The QKV projection's and norm1's backward on tokens [n0, n0 + n) (xn1 holding the chunk) from
// dqkv: dw accumulates, dresid's rows n0.. (dL/dx2) become dL/dx, in place.
template <typename T>
void qkv_backward(const Ops<T>& ops, const LayerShape& s, const DecoderView<const T>& w,
                  const DecoderView<acc_t<T>>& dw, const T* x, const DecoderActs<T>& a, T* dresid, const T* dqkv,
                  const DecoderScratch<T>& sc, int n0, int n) {
  const ModelConfig& c = *s.cfg;
  const int C = c.hidden_size, QKV = c.qkv_dim();
  const size_t off = size_t(n0) * C;
  ops.zero(sc.dxn, size_t(n) * C);
  ops.matmul_backward(sc.dxn, dw.wqkv, dw.bqkv, dqkv + size_t(n0) * QKV, w.ln1 ? a.xn1 : x + off, w.wqkv, n, C, QKV);
  input_norm_backward(ops, c, dresid + off, dw.ln1, sc.dxn, x + off, w.ln1, w.ln1 ? a.rstd1 + n0 : nullptr, n);
}

// ---- a mixture-of-experts layer's MLP block ----------------------------------------------------

// The shared expert (Qwen2-MoE) on tokens [n0, n0 + n) of moe.in: gu, h and its output y in mo;
// out (when given) += sigmoid(gate) * y.
template <typename T>
void shared_expert_forward(const Ops<T>& ops, const LayerShape& s, const DecoderView<const T>& w,
                           const DecoderActs<T>& a, const MoeActs<T>& m, int n0, int n, T* out) {
  const ModelConfig& c = *s.cfg;
  const int C = c.hidden_size, F = c.moe.shared_ffn;
  ops.matmul_forward(a.gu, m.in + size_t(n0) * C, w.wgu, nullptr, n, C, 2 * F);
  ops.swiglu_forward(a.h, a.gu, n, F, c.activation);
  ops.matmul_forward(a.mo, a.h, w.wdown, nullptr, n, F, C);
  if (out) ops.sigmoid_gate_forward(out + size_t(n0) * C, a.mo, m.gate + n0, n, C);
}

// in = norm2(x2); the router's logits and choice (its statistics added to moe.stats); the
// permutation of the tokens to the experts; out (when given) = x2 + the gated shared expert.
// A chunked recompute (out == nullptr) leaves the shared expert to the backward's chunks.
template <typename T>
void moe_mlp_forward(const Ops<T>& ops, const LayerShape& s, const DecoderView<const T>& w, const DecoderActs<T>& a,
                     const MoeActs<T>& m, T* out) {
  const ModelConfig& c = *s.cfg;
  const int N = s.N(), C = c.hidden_size, E = c.moe.num_experts, M = s.chunk();
  norm_forward(ops, c, m.in, a.rstd2, a.x2, w.ln2, N);
  ops.matmul_forward(m.logits, m.in, w.router, w.router_b, N, C, E);
  ops.moe_route_forward(m.idx, m.w, m.stats, m.logits, router_shape(s));
  ops.moe_sort(m.rows, m.offsets, m.idx, N, E, c.moe.top_k);
  if (w.shared_gate) ops.matmul_forward(m.gate, m.in, w.shared_gate, nullptr, N, C, 1);
  if (out) ops.copy(out, a.x2, size_t(N) * C);
  if (!w.wgu || (!out && s.chunked())) return;
  for (int n0 = 0; n0 < N; n0 += M) shared_expert_forward(ops, s, w, a, m, n0, std::min(M, N - n0), out);
}

// The block's backward once its experts' have run: the shared expert and its gate, the router
// (with the load-balancing loss's gradient), norm2 — moe.din gathering d(in) from each — and
// dresid (dL/dout) becoming dL/dx2.
template <typename T>
void moe_mlp_backward(const Ops<T>& ops, const LayerShape& s, const DecoderView<const T>& w,
                      const DecoderView<acc_t<T>>& dw, const DecoderActs<T>& a, const MoeActs<T>& m, T* dresid,
                      const DecoderScratch<T>& sc) {
  const ModelConfig& c = *s.cfg;
  const int N = s.N(), C = c.hidden_size, E = c.moe.num_experts, M = s.chunk(), F = c.moe.shared_ffn;
  for (int n0 = 0; w.wgu && n0 < N; n0 += M) {
    const int n = std::min(M, N - n0);
    if (s.chunked()) shared_expert_forward(ops, s, w, a, m, n0, n, static_cast<T*>(nullptr));
    ops.sigmoid_gate_backward(sc.dmo, m.dgate + n0, dresid + size_t(n0) * C, a.mo, m.gate + n0, n, C);
    ops.zero(sc.dh, size_t(n) * F);
    ops.matmul_backward(sc.dh, dw.wdown, nullptr, sc.dmo, a.h, w.wdown, n, F, C);
    ops.swiglu_backward(sc.dgu, sc.dh, a.gu, n, F, c.activation);
    ops.matmul_backward(m.din + size_t(n0) * C, dw.wgu, nullptr, sc.dgu, m.in + size_t(n0) * C, w.wgu, n, C, 2 * F);
  }
  if (w.shared_gate) ops.matmul_backward(m.din, dw.shared_gate, nullptr, m.dgate, m.in, w.shared_gate, N, C, 1);
  ops.moe_route_backward(m.dlogits, m.dw, m.logits, m.idx, m.w, m.counts, m.aux_scale,
                         router_shape(s));
  ops.matmul_backward(m.din, dw.router, dw.router_b, m.dlogits, m.in, w.router, N, C, E);
  input_norm_backward(ops, c, dresid, dw.ln2, m.din, a.x2, w.ln2, a.rstd2, N);
}

// An expert on n of its tokens (their slots `rows`, from slot `first` of the expert order) up to
// its down projection's input: x = their inputs, gu, h (all the backward recomputes: it needs no
// y, see expert_backward). With kept activations, gu and h are written (and read back) there.
template <typename T>
ExpertScratch<T> expert_rows_hidden(const Ops<T>& ops, const ModelConfig& c, const ExpertView<const T>& w,
                                    const MoeActs<T>& m, int first, int n, ExpertScratch<T> x, bool compute) {
  const int C = c.hidden_size, F = c.moe.expert_ffn;
  if (m.kept_gu) x.gu = m.kept_gu + size_t(first) * 2 * F, x.h = m.kept_h + size_t(first) * F;
  ops.moe_gather(x.x, m.in, m.rows + first, n, C, c.moe.top_k);
  if (compute) {
    ops.matmul_forward(x.gu, x.x, w.wgu, w.bgu, n, C, 2 * F);
    ops.swiglu_forward(x.h, x.gu, n, F, c.activation);
  }
  return x;
}

// Layer l's attention: its window and the model's scale; its RoPE table (the local one of
// Gemma 3's sliding layers follows the global one in inv_freq) and the table's attention factor:
// the local table is default RoPE, so YaRN's factor scales only the global layers, as
// transformers' separate local rotary embedding does.
AttentionOptions attention_options(const ModelConfig& c, int l) {
  return {c.layer_attention(l).window, c.attention_scale, c.attention_softcap};
}
const float* rope_table(const LayerShape& s, int l) {
  return s.cfg->layer_attention(l).local_rope ? s.inv_freq + s.cfg->head_dim / 2 : s.inv_freq;
}
float rope_factor(const LayerShape& s, int l) {
  return s.cfg->layer_attention(l).local_rope ? 1.0f : float(s.cfg->rope_attention_factor);
}

}  // namespace

template <typename T>
void decoder_forward(const Ops<T>& ops, const LayerShape& s, int layer, const DecoderView<const T>& w, const T* x,
                     T* out, const DecoderActs<T>& a, const MoeActs<T>* moe) {
  const ModelConfig& c = *s.cfg;
  const int N = s.N(), C = c.hidden_size, M = s.chunk();
  // attention block: x2 = x + [norm](o_proj(attn(rope([qk_norm](qkv([norm](x))))))), the norm and
  // projection chunk by chunk (attention itself needs every token's q, k and v)
  for (int n0 = 0; n0 < N; n0 += M) qkv_forward(ops, s, w, x, a, n0, std::min(M, N - n0));
  if (w.qn)
    ops.qk_norm_forward(a.qkv, a.qk_rstd, a.qkv_raw, w.qn, w.kn, qk_norm_shape(s), float(c.rms_norm_eps), c.norm_offset);
  ops.rope_forward(a.qkv, rope_table(s, layer), s.pos, s.B, s.T, c.num_heads, c.num_kv_heads, c.head_dim,
                   rope_factor(s, layer));
  ops.attention_forward(a.att, a.lse, a.qkv, s.documents(), attention_options(c, layer), s.B, s.T, c.num_heads,
                        c.num_kv_heads, c.head_dim);
  if (w.sinks) ops.attention_sinks_forward(a.att, a.lse, w.sinks, s.B, s.T, c.num_heads, c.head_dim);
  if (w.ln_attn_out) {
    ops.matmul_forward(a.ao, a.att, w.wo, w.bo, N, c.q_dim(), C);
    norm_forward(ops, c, a.x2, a.ao_rstd, a.ao, w.ln_attn_out, N);
  } else {
    ops.matmul_forward(a.x2, a.att, w.wo, w.bo, N, c.q_dim(), C);
  }
  ops.add_inplace(a.x2, x, size_t(N) * C);
  if (moe) return moe_mlp_forward(ops, s, w, a, *moe, out);
  // MLP block: out = x2 + [norm](down(act(gate(norm(x2))) * up(norm(x2)))), chunk by chunk. A
  // recompute for backward (out == nullptr) of a chunked block stops here: the backward
  // recomputes each chunk; unchunked, the acts it leaves are what the backward reads.
  if (!out && s.chunked()) return;
  for (int n0 = 0; n0 < N; n0 += M) mlp_forward(ops, s, w, a, n0, std::min(M, N - n0), out);
}

template <typename T>
void decoder_backward(const Ops<T>& ops, const LayerShape& s, int layer, const DecoderView<const T>& w,
                      const DecoderView<acc_t<T>>& dw, const T* x, const DecoderActs<T>& a, T* dresid,
                      const DecoderScratch<T>& sc, const MoeActs<T>* moe) {
  const ModelConfig& c = *s.cfg;
  const int N = s.N(), Q = c.q_dim(), C = c.hidden_size, M = s.chunk();
  // MLP block, chunk by chunk (a chunked block first recomputes the chunk's activations);
  // dresid becomes dL/dx2
  if (moe) moe_mlp_backward(ops, s, w, dw, a, *moe, dresid, sc);
  for (int n0 = 0; !moe && n0 < N; n0 += M) {
    const int n = std::min(M, N - n0);
    if (s.chunked()) mlp_forward(ops, s, w, a, n0, n, static_cast<T*>(nullptr));
    mlp_backward(ops, s, w, dw, a, dresid, sc, n0, n);
  }
  // attention block; then the QKV projection and norm1 chunk by chunk (a chunked block first
  // recomputes the chunk's norm), dresid becoming dL/dx
  const T* dtop = dresid;  // dL/d(o_proj's output)
  if (w.ln_attn_out) {
    ops.zero(sc.dao, size_t(N) * C);
    norm_backward(ops, c, sc.dao, dw.ln_attn_out, dresid, a.ao, w.ln_attn_out, a.ao_rstd, N);
    dtop = sc.dao;
  }
  ops.zero(sc.datt, size_t(N) * Q);
  ops.matmul_backward(sc.datt, dw.wo, dw.bo, dtop, a.att, w.wo, N, Q, C);
  if (w.sinks) ops.attention_sinks_backward(dw.sinks, sc.datt, a.att, a.lse, w.sinks, s.B, s.T, c.num_heads, c.head_dim);
  ops.attention_backward(sc.dqkv, sc.datt, a.qkv, a.att, a.lse, s.documents(), attention_options(c, layer), s.B, s.T,
                         c.num_heads, c.num_kv_heads, c.head_dim);
  ops.rope_backward(sc.dqkv, rope_table(s, layer), s.pos, s.B, s.T, c.num_heads, c.num_kv_heads, c.head_dim,
                    rope_factor(s, layer));
  const T* dqkv = sc.dqkv;
  if (w.qn) {
    ops.qk_norm_backward(sc.dqkv_raw, dw.qn, dw.kn, sc.dqkv, a.qkv_raw, w.qn, w.kn, a.qk_rstd, qk_norm_shape(s),
                         c.norm_offset);
    dqkv = sc.dqkv_raw;
  }
  for (int n0 = 0; n0 < N; n0 += M) {
    const int n = std::min(M, N - n0);
    if (s.chunked() && w.ln1) norm_forward(ops, c, a.xn1, a.rstd1 + n0, x + size_t(n0) * C, w.ln1, n);
    qkv_backward(ops, s, w, dw, x, a, dresid, dqkv, sc, n0, n);
  }
}

template <typename T>
void expert_forward(const Ops<T>& ops, const LayerShape& s, int e, const ExpertView<const T>& w, const MoeActs<T>& m,
                    T* out, const ExpertScratch<T>& sc) {
  const ModelConfig& c = *s.cfg;
  const int first = m.host_offsets[e], n = expert_tokens(m, e), M = s.chunk();
  for (int j = 0; j < n; j += M) {
    const int r = std::min(M, n - j);
    const ExpertScratch<T> x = expert_rows_hidden(ops, c, w, m, first + j, r, sc, true);
    ops.matmul_forward(x.y, x.h, w.wdown, w.bdown, r, c.moe.expert_ffn, c.hidden_size);
    ops.moe_scatter(out, x.y, m.rows + first + j, m.w, r, c.hidden_size, c.moe.top_k);
  }
}

template <typename T>
void expert_backward(const Ops<T>& ops, const LayerShape& s, int e, const ExpertView<const T>& w,
                     const ExpertView<acc_t<T>>& dw, const MoeActs<T>& m, const T* dout, const ExpertScratch<T>& sc) {
  const ModelConfig& c = *s.cfg;
  const int C = c.hidden_size, F = c.moe.expert_ffn, k = c.moe.top_k;
  const int first = m.host_offsets[e], n = expert_tokens(m, e), M = s.chunk();
  for (int j = 0; j < n; j += M) {
    const int32_t* rows = m.rows + first + j;
    const int r = std::min(M, n - j);
    const ExpertScratch<T> x = expert_rows_hidden(ops, c, w, m, first + j, r, sc, !m.kept_gu);  // unless kept
    // The routing weight's gradient dout . y without y: dout . (h W^T + b) = (dout W) . h + dout . b,
    // and dout W is the down projection's input gradient before the weight scales it.
    ops.moe_gather(x.dy, dout, rows, r, C, k);
    ops.zero(x.dh, size_t(r) * F);
    ops.matmul_backward(x.dh, static_cast<acc_t<T>*>(nullptr), static_cast<acc_t<T>*>(nullptr), x.dy, x.h, w.wdown, r,
                        F, C);
    ops.moe_weight_backward(m.dw, x.dh, x.dy, x.h, w.bdown, rows, m.w, r, F, C);
    ops.matmul_backward(static_cast<T*>(nullptr), dw.wdown, dw.bdown, x.dy, x.h, w.wdown, r, F, C);
    ops.swiglu_backward(x.dgu, x.dh, x.gu, r, F, c.activation);
    ops.zero(x.dx, size_t(r) * C);
    ops.matmul_backward(x.dx, dw.wgu, dw.bgu, x.dgu, x.x, w.wgu, r, C, 2 * F);
    ops.moe_scatter(m.din, x.dx, rows, static_cast<const acc_t<T>*>(nullptr), r, C, k);
  }
}

// Gemma scales the embedding's output by sqrt(hidden_size): the backward scales dx by the same
// factor, in place (dx is the residual gradient, not read after the embedding).
template <typename T>
void embedding_forward(const Ops<T>& ops, const LayerShape& s, const T* wte, const int32_t* tokens, T* out) {
  const ModelConfig& c = *s.cfg;
  ops.embedding_forward(out, tokens, wte, s.N(), c.hidden_size);
  if (c.embedding_scale != 1) ops.scale_inplace(out, float(c.embedding_scale), size_t(s.N()) * c.hidden_size);
}

template <typename T>
void embedding_backward(const Ops<T>& ops, const LayerShape& s, acc_t<T>* dwte, const int32_t* tokens, T* dx) {
  const ModelConfig& c = *s.cfg;
  if (c.embedding_scale != 1) ops.scale_inplace(dx, float(c.embedding_scale), size_t(s.N()) * c.hidden_size);
  ops.embedding_backward(dwte, dx, tokens, s.N(), c.hidden_size);
}

template <typename T>
void head_forward_backward(const Ops<T>& ops, const LayerShape& s, const T* norm_w, const T* lm, acc_t<T>* dnorm_w,
                           acc_t<T>* dlm, const T* x, const int32_t* targets, acc_t<T> grad_scale, T* dx,
                           const HeadScratch<T>& sc, double* loss_totals) {
  const ModelConfig& c = *s.cfg;
  const int N = s.N(), C = c.hidden_size;
  norm_forward(ops, c, sc.xn, sc.rstd, x, norm_w, N);
  ops.lm_head_loss(dx ? sc.dxn : nullptr, dlm, nullptr, sc.xn, lm, targets, N, C, c.vocab_size, s.head_chunk,
                   grad_scale, float(c.final_softcap), sc.logits, loss_totals);
  if (dx) {
    ops.zero(dx, size_t(N) * C);
    norm_backward(ops, c, dx, dnorm_w, sc.dxn, x, norm_w, sc.rstd, N);
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
  template size_t moe_acts_bytes<T>(const LayerShape&);                                                  \
  template MoeActs<T> bind_moe_acts(const LayerShape&, void*);                                           \
  template void decoder_forward(const Ops<T>&, const LayerShape&, int, const DecoderView<const T>&,     \
                                const T*, T*, const DecoderActs<T>&, const MoeActs<T>*);                 \
  template void decoder_backward(const Ops<T>&, const LayerShape&, int, const DecoderView<const T>&,     \
                                 const DecoderView<acc_t<T>>&, const T*, const DecoderActs<T>&, T*,      \
                                 const DecoderScratch<T>&, const MoeActs<T>*);                           \
  template void expert_forward(const Ops<T>&, const LayerShape&, int, const ExpertView<const T>&,        \
                               const MoeActs<T>&, T*, const ExpertScratch<T>&);                          \
  template void expert_backward(const Ops<T>&, const LayerShape&, int, const ExpertView<const T>&,       \
                                const ExpertView<acc_t<T>>&, const MoeActs<T>&, const T*,               \
                                const ExpertScratch<T>&);                                                \
  template void embedding_forward(const Ops<T>&, const LayerShape&, const T*, const int32_t*, T*);       \
  template void embedding_backward(const Ops<T>&, const LayerShape&, acc_t<T>*, const int32_t*, T*);     \
  template void head_forward_backward(const Ops<T>&, const LayerShape&, const T*, const T*, acc_t<T>*,   \
                                      acc_t<T>*, const T*, const int32_t*, acc_t<T>, T*,                 \
                                      const HeadScratch<T>&, double*);
MT_INSTANTIATE_LAYERS(float)
MT_INSTANTIATE_LAYERS(double)
MT_INSTANTIATE_LAYERS(bf16)
#undef MT_INSTANTIATE_LAYERS

}  // namespace mt

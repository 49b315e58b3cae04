// Layer templates: the stateless forward and backward of each unit kind, written once against
// Ops<T> so they run on every backend. Weights arrive as views (param_schema.h) of wherever the
// unit sits; activations and scratch are views into caller-owned buffers. No per-layer objects.
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/model/model_config.h"
#include "engine/backend/ops.h"
#include "engine/model/param_schema.h"

namespace mt {

// What a layer call needs besides weights: the model, the micro-batch shape (B sequences of
// T tokens), the rotary table (a device pointer, head_dim/2 floats) and, for packed documents,
// each token's position in its document (a device pointer, B*T; nullptr = one document per
// row). RoPE rotates by those positions and attention is masked to each document.
struct LayerShape {
  const ModelConfig* cfg = nullptr;
  int B = 0;
  int T = 0;
  const float* inv_freq = nullptr;
  int head_chunk = 256;  // tokens per chunk of the fused LM head + loss
  // Tokens per chunk of a decoder's token-wise work: norm1 and the QKV projection, and the MLP
  // block (norm2, gate/up, SwiGLU, down, residual); 0 = all. Chunked, a layer keeps O(chunk x F)
  // of these activations and recomputes them chunk by chunk in the backward; weight gradients
  // accumulate over the chunks. Attention and the O projection span the micro-batch.
  int token_chunk = 0;
  const int32_t* pos = nullptr;  // document positions, [B*T] on the device (see above)
  const DocumentSpans* spans = nullptr;  // the same documents as spans, where the executor has them
  Documents documents() const { return {pos, spans}; }
  int N() const { return B * T; }
  int chunk() const { return token_chunk > 0 && token_chunk < N() ? token_chunk : N(); }
  bool chunked() const { return chunk() < N(); }
};

// Workspaces are laid out in bytes: T regions (activations) and acc_t<T> regions (statistics,
// the head's logits) alternate, each aligned to kWorkspaceAlign. The *_bytes functions and
// the binds walk the same layout, so a size and its bind always agree.
constexpr size_t kWorkspaceAlign = 256;

// A layer workspace's bytes (acts + scratch + head scratch) by what they grow with: the
// micro-batch's tokens (attention's q/k/v, output, statistics and gradients; the residual x2;
// the head's norm) or one token chunk (the norms' outputs, the MLP, the head's logits chunk).
struct WorkspaceSplit {
  size_t sequence = 0;
  size_t chunk = 0;
};
template <typename T>
WorkspaceSplit layer_workspace_split(const LayerShape& s);

// Saved activations of one decoder layer for one micro-batch. A region the family's variants
// do not use is nullptr and takes no bytes: xn1/rstd1 and xn2/rstd2 (the branches' input norms)
// without pre-norms, qkv_raw/qk_rstd (the q/k norms' input) without q/k norms, ao/mo and their
// rstd (the branches' outputs before their norms) without post-norms.
template <typename T>
struct DecoderActs {
  T* xn1;
  acc_t<T>* rstd1;
  T* qkv_raw;
  acc_t<T>* qk_rstd;
  T *qkv, *att;
  acc_t<T>* lse;
  T* ao;
  acc_t<T>* ao_rstd;
  T *x2, *xn2;
  acc_t<T>* rstd2;
  T *gu, *h, *mo;
  acc_t<T>* mo_rstd;
};
template <typename T>
size_t decoder_acts_bytes(const LayerShape& s);
template <typename T>
DecoderActs<T> bind_decoder_acts(const LayerShape& s, void* base);

// An expert's work on one chunk of its tokens: their inputs, gate/up, activation, output, and
// the backward's gradients of each (expert_forward, expert_backward).
template <typename T>
struct ExpertScratch {
  T *x, *gu, *h, *y, *dy, *dh, *dgu, *dx;  // one chunk of an expert's tokens
};

// Backward scratch of one decoder layer for one micro-batch (reused across layers).
template <typename T>
struct DecoderScratch {
  T *dh, *dgu, *dxn, *dmo, *dao, *datt, *dqkv, *dqkv_raw;  // dmo, dao: post-norms; dqkv_raw: q/k norms
  ExpertScratch<T> expert;                                  // a mixture of experts' (its forward too)
};
template <typename T>
size_t decoder_scratch_bytes(const LayerShape& s);
template <typename T>
DecoderScratch<T> bind_decoder_scratch(const LayerShape& s, void* base);

// A mixture-of-experts layer's state for one micro-batch, beside its DecoderActs (kernels/moe.h
// names the routing arrays). The layer's decoder unit fills it (norm2, router, shared expert);
// its experts then read it one by one. The streaming executor points it at one micro-batch's
// part of buffers that span the step (every micro-batch passes each expert while it is
// resident); the resident pass at its workspace. Regions a family lacks are nullptr.
template <typename T>
struct MoeActs {
  T* in;             // [N, C] the router's, experts' and shared expert's input: norm2(x2)
  T* logits;         // [N, E] the router's
  int32_t* idx;      // [N, k]
  acc_t<T>* w;       // [N, k]
  int32_t* rows;     // [N*k]
  int32_t* offsets;  // [E + 1], on the device
  T* gate;           // [N] the shared expert's gate logit
  T* din;            // [N, C] backward: d(in), the experts' share (+=) and then the rest
  acc_t<T>* dw;      // [N, k] backward: d(w), written by the experts
  T* dlogits;        // [N, E]
  T* dgate;          // [N]
  // Not workspace; the caller sets them:
  const int32_t* host_offsets = nullptr;  // offsets where the host reads them (they size the GEMMs)
  // Where the experts' activations are kept for the backward, in slot order (expert e's rows
  // from host_offsets[e]): gate/up [N*k, 2F] and activation [N*k, F]. nullptr: the backward
  // recomputes them (the streaming executor, and a pass that recomputes).
  T* kept_gu = nullptr;
  T* kept_h = nullptr;
  // The load-balancing statistics [2E] (kernels/moe.h) of this micro-batch over every MoE layer:
  // the forward adds to stats (nullptr: a recompute adds nothing); the backward reads the counts
  // they end with for the loss's gradient, aux_scale * counts[e] per token (nullptr: no aux loss).
  acc_t<T>* stats = nullptr;
  const acc_t<T>* counts = nullptr;
  acc_t<T> aux_scale = 0;
};
template <typename T>
size_t moe_acts_bytes(const LayerShape& s);
template <typename T>
MoeActs<T> bind_moe_acts(const LayerShape& s, void* base);
// The load-balancing loss's gradient scale for one micro-batch of a step of `micro_batches`:
// d(coef * mean over micro-batches of aux)/d(softmax(logits)[t, e]) = aux_scale * counts[e].
double moe_aux_scale(const LayerShape& s, int micro_batches);
// The load-balancing loss of one micro-batch from its statistics [2E] (before the coefficient).
double moe_aux_loss(const LayerShape& s, const double* stats);

// out = layer(x) for decoder layer `layer` (its attention: ModelConfig::layer_attention); fills
// acts (and, for an MoE layer, moe: out is then x2 + the shared expert; expert_forward adds the
// experts). x and out are [N, C]. out == nullptr skips the last projection where it can (a
// recompute before backward needs only the activations).
template <typename T>
void decoder_forward(const Ops<T>& ops, const LayerShape& s, int layer, const DecoderView<const T>& w, const T* x,
                     T* out, const DecoderActs<T>& a, const MoeActs<T>* moe = nullptr);

// dresid holds dL/dout on entry and dL/dx on return; dw (full precision) accumulates (+=). An
// MoE layer's experts have run expert_backward (moe->din, moe->dw) before.
template <typename T>
void decoder_backward(const Ops<T>& ops, const LayerShape& s, int layer, const DecoderView<const T>& w,
                      const DecoderView<acc_t<T>>& dw, const T* x, const DecoderActs<T>& a, T* dresid,
                      const DecoderScratch<T>& sc, const MoeActs<T>* moe = nullptr);

// Expert e of an MoE layer on one micro-batch (its tokens: moe's rows, host_offsets): out[t] +=
// w * expert(in[t]) for each of them. Its backward recomputes the activations up to the down
// projection's input (not its output: the routing weight's gradient comes from that input's
// gradient), accumulates dw (+=), adds d(in) into moe.din and writes moe.dw of its slots; dout
// is dL/dout.
template <typename T>
void expert_forward(const Ops<T>& ops, const LayerShape& s, int e, const ExpertView<const T>& w, const MoeActs<T>& moe,
                    T* out, const ExpertScratch<T>& sc);
template <typename T>
void expert_backward(const Ops<T>& ops, const LayerShape& s, int e, const ExpertView<const T>& w,
                     const ExpertView<acc_t<T>>& dw, const MoeActs<T>& moe, const T* dout, const ExpertScratch<T>& sc);
// Tokens routed to expert e in this micro-batch.
template <typename T>
int expert_tokens(const MoeActs<T>& m, int e) {
  return m.host_offsets[e + 1] - m.host_offsets[e];
}

template <typename T>
void embedding_forward(const Ops<T>& ops, const LayerShape& s, const T* wte, const int32_t* tokens, T* out);
// dx (dL/d(embedding output)) is scaled in place by the embedding scale (Gemma) before the scatter.
template <typename T>
void embedding_backward(const Ops<T>& ops, const LayerShape& s, acc_t<T>* dwte, const int32_t* tokens, T* dx);

// Final norm + LM head + cross-entropy, forward and (when dx != nullptr) backward in one pass.
// lm is the LM-head matrix [V, C] (the embedding when tied); dlm accumulates its gradient.
// loss_totals (device, 2 doubles) receives {loss sum, counted targets} (see Ops::lm_head_loss).
template <typename T>
struct HeadScratch {
  T* xn;
  acc_t<T>* rstd;
  T* dxn;
  void* logits;  // lm_head_scratch_bytes<T>(head_chunk, V)
};
template <typename T>
size_t head_scratch_bytes(const LayerShape& s);
template <typename T>
HeadScratch<T> bind_head_scratch(const LayerShape& s, void* base);

template <typename T>
void head_forward_backward(const Ops<T>& ops, const LayerShape& s, const T* norm_w, const T* lm, acc_t<T>* dnorm_w,
                           acc_t<T>* dlm, const T* x, const int32_t* targets, acc_t<T> grad_scale, T* dx,
                           const HeadScratch<T>& sc, double* loss_totals);

}  // namespace mt

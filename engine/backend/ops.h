// Ops<T>: the op table a backend provides to the layer templates — the kernels/ families behind
// one interface (ggml-style), so one forward/backward code path runs on every backend and in
// every compute dtype. All pointers are device pointers of that backend; calls are ordered on
// its compute stream.
//
// T is the storage type of weights and activations: float, double (gradient checks) or bf16
// (mixed precision). acc_t<T> holds what must stay at full precision: normalisation statistics,
// attention's log-sum-exp, weight gradients (accumulated across micro-batches), the loss head's
// logits and losses. For float and double acc_t<T> is T, so their table is unchanged. For bf16
// every op reads bf16, computes in fp32 and rounds each bf16 output once (docs/ARCHITECTURE.md,
// "Mixed precision", lists the rounding points).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/lm_head_loss.h"
#include "kernels/moe.h"
#include "kernels/qk_norm.h"
#include "kernels/swiglu.h"

namespace mt {

template <typename T>
struct Accum {
  using type = T;
};
template <>
struct Accum<bf16> {
  using type = float;
};
template <typename T>
using acc_t = typename Accum<T>::type;

enum class Precision { kFp32, kBf16 };
const char* precision_name(Precision p);
size_t compute_elem_bytes(Precision p);  // bytes of one weight or activation on the device

// The documents of a packed micro-batch as attention sees them: pos [B*T] (device), each token's
// position in its document, or nullptr for one document per row (kernels/attention.h); and,
// where the executor provides them, the same documents as spans (kernels that take ragged
// sequences, cuDNN's, need them and fall back to the others without). Converts from a bare pos.
struct Documents {
  Documents(const int32_t* p = nullptr, const DocumentSpans* s = nullptr) : pos(p), spans(s) {}
  const int32_t* pos;
  const DocumentSpans* spans;
};

template <typename T>
class Ops {
 public:
  using A = acc_t<T>;
  virtual ~Ops() = default;
  virtual void matmul_forward(T* out, const T* inp, const T* w, const T* b, int N, int C, int OC) const = 0;
  // dinp += dout @ w; dw += dout^T @ inp; db += column sums of dout (any may be nullptr).
  virtual void matmul_backward(T* dinp, A* dw, A* db, const T* dout, const T* inp, const T* w, int N, int C,
                               int OC) const = 0;
  // The scale is w + offset (kernels/rmsnorm.h: 0 for Llama's norms, 1 for Gemma's).
  virtual void rmsnorm_forward(T* out, A* rstd, const T* inp, const T* w, int N, int C, float eps,
                               float offset) const = 0;
  virtual void rmsnorm_backward(T* dinp, A* dw, const T* dout, const T* inp, const T* w, const A* rstd, int N, int C,
                                float offset) const = 0;
  // Q/K norms (kernels/qk_norm.h): qkv = raw with q and k normalised; draw is overwritten.
  virtual void qk_norm_forward(T* qkv, A* rstd, const T* raw, const T* wq, const T* wk, const QkNormShape& s, float eps,
                               float offset) const = 0;
  virtual void qk_norm_backward(T* draw, A* dwq, A* dwk, const T* dqkv, const T* raw, const T* wq, const T* wk,
                                const A* rstd, const QkNormShape& s, float offset) const = 0;
  // pos [B*T] (device): each token's position in its document, or nullptr for one document
  // per row (kernels/attention.h). RoPE rotates by it; attention masks to the document it
  // implies. scale multiplies cos and sin (YaRN's attention factor; 1 otherwise).
  virtual void rope_forward(T* qkv, const float* inv_freq, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                            float scale) const = 0;
  virtual void rope_backward(T* dqkv, const float* inv_freq, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                             float scale) const = 0;
  // opt: the layer's sliding window and score scale (kernels/attention.h).
  virtual void attention_forward(T* out, A* lse, const T* qkv, Documents docs, const AttentionOptions& opt, int B,
                                 int T_, int H, int KVH, int D) const = 0;
  // dqkv is overwritten.
  virtual void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const A* lse, Documents docs,
                                  const AttentionOptions& opt, int B, int T_, int H, int KVH, int D) const = 0;
  // out = act(gate) * up (kernels/swiglu.h).
  virtual void swiglu_forward(T* out, const T* gu, int N, int F, Activation act) const = 0;
  virtual void swiglu_backward(T* dgu, const T* dout, const T* gu, int N, int F, Activation act) const = 0;
  // Attention sinks (gpt-oss; kernels/attention.h): folded into out and lse after
  // attention_forward; the backward before attention_backward (dsinks +=).
  virtual void attention_sinks_forward(T* out, A* lse, const T* sinks, int B, int T_, int H, int D) const = 0;
  virtual void attention_sinks_backward(A* dsinks, const T* dout, const T* out, const A* lse, const T* sinks, int B,
                                        int T_, int H, int D) const = 0;
  // Mixture of experts (kernels/moe.h): the router's choice and its backward (dlogits
  // overwritten; counts nullptr: no load-balancing gradient), the permutation of tokens to
  // experts (rows, offsets overwritten), the gather (=) and weighted scatter (+=) around an
  // expert's MLP and the scatter's backward (dy, dw overwritten). moe_scatter's n slots must
  // name distinct tokens (one expert's, as every caller passes): the CUDA kernel adds without
  // atomics, so two slots of one token in one call race there.
  virtual void moe_route_forward(int32_t* idx, A* w, A* stats, const T* logits, const RouterShape& s) const = 0;
  virtual void moe_route_backward(T* dlogits, const A* dw, const T* logits, const int32_t* idx, const A* w,
                                  const A* counts, A aux_scale, const RouterShape& s) const = 0;
  virtual void moe_sort(int32_t* rows, int32_t* offsets, const int32_t* idx, int N, int E, int k) const = 0;
  virtual void moe_gather(T* out, const T* x, const int32_t* rows, int n, int C, int k) const = 0;
  virtual void moe_scatter(T* out, const T* y, const int32_t* rows, const A* w, int n, int C, int k) const = 0;
  // The weighted scatter's backward behind the down projection (kernels/moe.h): dw written,
  // dh and dy (the unweighted gradients on entry) weighted in place.
  virtual void moe_weight_backward(A* dw, T* dh, T* dy, const T* h, const T* b, const int32_t* rows, const A* w, int n,
                                   int F, int C) const = 0;
  // Qwen2-MoE's shared expert: out += sigmoid(g) * y per token; dy, dg overwritten.
  virtual void sigmoid_gate_forward(T* out, const T* y, const T* g, int N, int C) const = 0;
  virtual void sigmoid_gate_backward(T* dy, T* dg, const T* dout, const T* y, const T* g, int N, int C) const = 0;
  virtual void embedding_forward(T* out, const int32_t* tokens, const T* wte, int N, int C) const = 0;
  virtual void embedding_backward(A* dwte, const T* dout, const int32_t* tokens, int N, int C) const = 0;
  // As cpu::lm_head_loss (softcap: the final logits' soft cap, 0 = none); the result stays on
  // the device: totals (device, 2 doubles) receives {sum of losses in token order, counted
  // targets}, for the host to read after an event. scratch holds lm_head_scratch_bytes<T>(chunk, V) bytes.
  virtual void lm_head_loss(T* dx, A* dW, A* losses, const T* x, const T* W, const int32_t* targets, int N, int C,
                            int V, int chunk, A grad_scale, float softcap, void* scratch, double* totals) const = 0;
  virtual void add_inplace(T* y, const T* x, size_t n) const = 0;  // y += x
  virtual void scale_inplace(T* y, float s, size_t n) const = 0;     // y *= s (Gemma's embedding scale)
  virtual void copy_bytes(void* dst, const void* src, size_t bytes) const = 0;
  virtual void zero_bytes(void* dst, size_t bytes) const = 0;

  template <typename U>
  void copy(U* dst, const U* src, size_t n) const {
    copy_bytes(dst, src, n * sizeof(U));
  }
  template <typename U>
  void zero(U* dst, size_t n) const {
    zero_bytes(dst, n * sizeof(U));
  }
};

// The number of Ops<T> methods above (its pure virtuals). The op table test has a row per method
// (tests/engine/backend/op_rows.h) and OpsTable.EveryOpHasARow checks that the rows name this many
// distinct ones: bump it with a new method, and that test fails until the method has its row.
inline constexpr int kOpCount = 29;

// Bytes of the LM head's scratch for `chunk` tokens: the fp32 (acc) logits of a chunk and, in
// bf16, the chunk's d(logits) rounded to bf16 for the two backward GEMMs.
template <typename T>
size_t lm_head_scratch_bytes(int chunk, int V) {
  const size_t n = size_t(chunk) * size_t(V);
  return n * sizeof(acc_t<T>) + (sizeof(T) < sizeof(acc_t<T>) ? n * sizeof(T) : 0);
}

// The CPU reference op table (kernels/cpu), for float, double and bf16: synchronous, on the
// calling thread (the resident executor and the gradient checks read results right after a call).
template <typename T>
const Ops<T>& cpu_ops();
template <>
const Ops<bf16>& cpu_ops<bf16>();  // cpu_ops_bf16.cc

}  // namespace mt

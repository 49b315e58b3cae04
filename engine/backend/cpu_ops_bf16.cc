// The CPU op table in bf16: every op widens its bf16 operands to fp32 (exactly), runs the fp32
// reference kernel (kernels/cpu) and rounds each bf16 output once — the rounding points of the
// CUDA bf16 kernels, so the two differ only in summation order. GEMMs take bf16 inputs directly
// (cpu::gemm_bf16: fp32 products and sums). Statistics, weight gradients and the loss stay fp32.
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/backend/ops.h"
#include "kernels/attention.h"
#include "kernels/embedding.h"
#include "kernels/matmul.h"
#include "kernels/moe.h"
#include "kernels/qk_norm.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

namespace mt {
namespace {

// Per-thread fp32 scratch that only grows: slot i holds the i-th widened operand of an op.
float* scratch(int slot, size_t n) {
  thread_local std::vector<float> buffers[4];
  std::vector<float>& b = buffers[slot];
  if (b.size() < n) b.resize(n);
  return b.data();
}

// x widened into scratch slot `slot`.
float* widen(int slot, const bf16* x, size_t n) {
  float* out = scratch(slot, n);
  widen_bf16(out, x, n);
  return out;
}

using RopeFn = void (*)(float*, const float*, const int32_t*, int, int, int, int, int, float);

// RoPE (either direction) on bf16 q/k/v in place: widened, rotated in fp32, rounded once.
void rope_in_place(RopeFn rope, bf16* qkv, const float* f, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                   float scale) {
  const size_t n = size_t(B) * T_ * size_t(H + 2 * KVH) * D;
  float* x = widen(0, qkv, n);
  rope(x, f, pos, B, T_, H, KVH, D, scale);
  round_to_bf16(qkv, x, n);
}

class CpuOpsBf16 final : public Ops<bf16> {
 public:
  void matmul_forward(bf16* out, const bf16* inp, const bf16* w, const bf16* b, int N, int C, int OC) const override {
    float* acc = scratch(0, size_t(N) * OC);
    if (b != nullptr) {
      const float* bias = widen(1, b, size_t(OC));
      for (int n = 0; n < N; ++n) std::memcpy(acc + size_t(n) * OC, bias, size_t(OC) * sizeof(float));
    }
    cpu::gemm_bf16(false, true, N, OC, C, 1.0f, inp, C, w, C, b != nullptr ? 1.0f : 0.0f, acc, OC);
    round_to_bf16(out, acc, size_t(N) * OC);
  }
  void matmul_backward(bf16* dinp, float* dw, float* db, const bf16* dout, const bf16* inp, const bf16* w, int N,
                       int C, int OC) const override {
    if (dinp != nullptr) {
      float* acc = widen(0, dinp, size_t(N) * C);
      cpu::gemm_bf16(false, false, N, C, OC, 1.0f, dout, OC, w, C, 1.0f, acc, C);
      round_to_bf16(dinp, acc, size_t(N) * C);
    }
    if (dw != nullptr) cpu::gemm_bf16(true, false, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C);
    if (db != nullptr)
      cpu::matmul_backward<float>(nullptr, nullptr, db, widen(1, dout, size_t(N) * OC), nullptr, nullptr, N, C, OC);
  }
  void rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const bf16* w, int N, int C, float eps,
                       float offset) const override {
    const size_t n = size_t(N) * C;
    float* o = scratch(2, n);
    cpu::rmsnorm_forward<float>(o, rstd, widen(0, inp, n), widen(1, w, size_t(C)), N, C, eps, offset);
    round_to_bf16(out, o, n);
  }
  void rmsnorm_backward(bf16* dinp, float* dw, const bf16* dout, const bf16* inp, const bf16* w, const float* rstd,
                        int N, int C, float offset) const override {
    const size_t n = size_t(N) * C;
    float* acc = widen(0, dinp, n);
    cpu::rmsnorm_backward<float>(acc, dw, widen(1, dout, n), widen(2, inp, n), widen(3, w, size_t(C)), rstd, N, C,
                                 offset);
    round_to_bf16(dinp, acc, n);
  }
  // The weights are widened into one buffer [wq | wk].
  void qk_norm_forward(bf16* qkv, float* rstd, const bf16* raw, const bf16* wq, const bf16* wk, const QkNormShape& s,
                       float eps, float offset) const override {
    const size_t n = size_t(s.N) * size_t(s.row()), nq = size_t(s.q_width()), nk = size_t(s.k_width());
    float* o = scratch(2, n);
    float* w = scratch(1, nq + nk);
    widen_bf16(w, wq, nq);
    widen_bf16(w + nq, wk, nk);
    cpu::qk_norm_forward<float>(o, rstd, widen(0, raw, n), w, w + nq, s, eps, offset);
    round_to_bf16(qkv, o, n);
  }
  void qk_norm_backward(bf16* draw, float* dwq, float* dwk, const bf16* dqkv, const bf16* raw, const bf16* wq,
                        const bf16* wk, const float* rstd, const QkNormShape& s, float offset) const override {
    const size_t n = size_t(s.N) * size_t(s.row()), nq = size_t(s.q_width()), nk = size_t(s.k_width());
    float* d = scratch(0, n);
    float* w = scratch(3, nq + nk);
    widen_bf16(w, wq, nq);
    widen_bf16(w + nq, wk, nk);
    cpu::qk_norm_backward<float>(d, dwq, dwk, widen(1, dqkv, n), widen(2, raw, n), w, w + nq, rstd, s, offset);
    round_to_bf16(draw, d, n);
  }
  void rope_forward(bf16* qkv, const float* f, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                    float scale) const override {
    rope_in_place(cpu::rope_forward<float>, qkv, f, pos, B, T_, H, KVH, D, scale);
  }
  void rope_backward(bf16* dqkv, const float* f, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                     float scale) const override {
    rope_in_place(cpu::rope_backward<float>, dqkv, f, pos, B, T_, H, KVH, D, scale);
  }
  void attention_forward(bf16* out, float* lse, const bf16* qkv, Documents docs, const AttentionOptions& opt, int B,
                         int T_, int H, int KVH, int D) const override {
    const size_t n_qkv = size_t(B) * T_ * size_t(H + 2 * KVH) * D, n_out = size_t(B) * T_ * size_t(H) * D;
    float* o = scratch(1, n_out);
    cpu::attention_forward<float>(o, lse, widen(0, qkv, n_qkv), docs.pos, B, T_, H, KVH, D, opt);
    round_to_bf16(out, o, n_out);
  }
  void attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
                          Documents docs, const AttentionOptions& opt, int B, int T_, int H, int KVH,
                          int D) const override {
    const size_t n_qkv = size_t(B) * T_ * size_t(H + 2 * KVH) * D, n_out = size_t(B) * T_ * size_t(H) * D;
    float* d = scratch(0, n_qkv);
    cpu::attention_backward<float>(d, widen(1, dout, n_out), widen(2, qkv, n_qkv), widen(3, out, n_out), lse, docs.pos,
                                   B, T_, H, KVH, D, opt);
    round_to_bf16(dqkv, d, n_qkv);
  }
  void swiglu_forward(bf16* out, const bf16* gu, int N, int F, Activation act) const override {
    const size_t n = size_t(N) * F;
    float* o = scratch(1, n);
    cpu::swiglu_forward<float>(o, widen(0, gu, 2 * n), N, F, act);
    round_to_bf16(out, o, n);
  }
  void swiglu_backward(bf16* dgu, const bf16* dout, const bf16* gu, int N, int F, Activation act) const override {
    const size_t n = size_t(N) * F;
    float* d = scratch(0, 2 * n);
    cpu::swiglu_backward<float>(d, widen(1, dout, n), widen(2, gu, 2 * n), N, F, act);
    round_to_bf16(dgu, d, 2 * n);
  }
  void attention_sinks_forward(bf16* out, float* lse, const bf16* sinks, int B, int T_, int H, int D) const override {
    const size_t n = size_t(B) * T_ * size_t(H) * D;
    float* o = widen(0, out, n);
    cpu::attention_sinks_forward<float>(o, lse, widen(1, sinks, size_t(H)), B, T_, H, D);
    round_to_bf16(out, o, n);
  }
  void attention_sinks_backward(float* dsinks, const bf16* dout, const bf16* out, const float* lse, const bf16* sinks,
                                int B, int T_, int H, int D) const override {
    const size_t n = size_t(B) * T_ * size_t(H) * D;
    cpu::attention_sinks_backward<float>(dsinks, widen(0, dout, n), widen(1, out, n), lse, widen(2, sinks, size_t(H)),
                                         B, T_, H, D);
  }
  void moe_route_forward(int32_t* idx, float* w, float* stats, const bf16* logits, const RouterShape& s) const override {
    cpu::moe_route_forward<float, float>(idx, w, stats, widen(0, logits, size_t(s.N) * s.E), s);
  }
  void moe_route_backward(bf16* dlogits, const float* dw, const bf16* logits, const int32_t* idx, const float* w,
                          const float* counts, float aux_scale, const RouterShape& s) const override {
    const size_t n = size_t(s.N) * s.E;
    float* d = scratch(1, n);
    cpu::moe_route_backward<float, float>(d, dw, widen(0, logits, n), idx, w, counts, aux_scale, s);
    round_to_bf16(dlogits, d, n);
  }
  void moe_sort(int32_t* rows, int32_t* offsets, const int32_t* idx, int N, int E, int k) const override {
    cpu::moe_sort(rows, offsets, idx, N, E, k);
  }
  void moe_gather(bf16* out, const bf16* x, const int32_t* rows, int n, int C, int k) const override {
    cpu::moe_gather(out, x, rows, n, C, k);
  }
  // Row by row (out is the whole micro-batch; an expert touches only its tokens' rows): each
  // output rounded once per call.
  void moe_scatter(bf16* out, const bf16* y, const int32_t* rows, const float* w, int n, int C, int k) const override {
    for (int i = 0; i < n; ++i) {
      bf16* o = out + size_t(rows[i] / k) * C;
      const bf16* yi = y + size_t(i) * C;
      const float wi = w ? w[rows[i]] : 1.0f;
      for (int c = 0; c < C; ++c) o[c] = float_to_bf16(bf16_to_float(o[c]) + wi * bf16_to_float(yi[c]));
    }
  }
  // fp32 dot products of the bf16 rows, as the CUDA kernel; each gradient rounded once more.
  void moe_weight_backward(float* dw, bf16* dh, bf16* dy, const bf16* h, const bf16* b, const int32_t* rows,
                           const float* w, int n, int F, int C) const override {
    for (int i = 0; i < n; ++i) {
      bf16* dhi = dh + size_t(i) * F;
      bf16* dyi = dy + size_t(i) * C;
      const bf16* hi = h + size_t(i) * F;
      float dot = 0;
      for (int f = 0; f < F; ++f) dot += bf16_to_float(dhi[f]) * bf16_to_float(hi[f]);
      if (b)
        for (int c = 0; c < C; ++c) dot += bf16_to_float(dyi[c]) * bf16_to_float(b[c]);
      dw[rows[i]] = dot;
      const float wi = w[rows[i]];
      for (int f = 0; f < F; ++f) dhi[f] = float_to_bf16(wi * bf16_to_float(dhi[f]));
      for (int c = 0; c < C; ++c) dyi[c] = float_to_bf16(wi * bf16_to_float(dyi[c]));
    }
  }

  void sigmoid_gate_forward(bf16* out, const bf16* y, const bf16* g, int N, int C) const override {
    const size_t n = size_t(N) * C;
    float* o = widen(0, out, n);
    cpu::sigmoid_gate_forward<float>(o, widen(1, y, n), widen(2, g, size_t(N)), N, C);
    round_to_bf16(out, o, n);
  }
  void sigmoid_gate_backward(bf16* dy, bf16* dg, const bf16* dout, const bf16* y, const bf16* g, int N,
                             int C) const override {
    const size_t n = size_t(N) * C;
    float* d = scratch(3, n + size_t(N));
    cpu::sigmoid_gate_backward<float>(d, d + n, widen(0, dout, n), widen(1, y, n), widen(2, g, size_t(N)), N, C);
    round_to_bf16(dy, d, n);
    round_to_bf16(dg, d + n, size_t(N));
  }
  void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, int N, int C) const override {
    for (int i = 0; i < N; ++i)
      std::memcpy(out + size_t(i) * C, wte + size_t(tokens[i]) * C, size_t(C) * sizeof(bf16));
  }
  void embedding_backward(float* dwte, const bf16* dout, const int32_t* tokens, int N, int C) const override {
    cpu::embedding_backward<float>(dwte, widen(0, dout, size_t(N) * C), tokens, N, C);
  }
  void lm_head_loss(bf16* dx, float* dW, float* losses, const bf16* x, const bf16* W, const int32_t* targets, int N,
                    int C, int V, int chunk, float grad_scale, float softcap, void* scratch_bytes,
                    double* totals) const override {
    const auto r = cpu::lm_head_loss(dx, dW, losses, x, W, targets, N, C, V, chunk, grad_scale, scratch_bytes, softcap);
    totals[0] = r.loss_sum;
    totals[1] = double(r.counted);
  }
  void add_inplace(bf16* y, const bf16* x, size_t n) const override {
    for (size_t i = 0; i < n; ++i) y[i] = float_to_bf16(bf16_to_float(y[i]) + bf16_to_float(x[i]));
  }
  void scale_inplace(bf16* y, float s, size_t n) const override {
    for (size_t i = 0; i < n; ++i) y[i] = float_to_bf16(bf16_to_float(y[i]) * s);
  }
  void copy_bytes(void* dst, const void* src, size_t bytes) const override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void zero_bytes(void* dst, size_t bytes) const override {
    if (bytes) std::memset(dst, 0, bytes);
  }
};

}  // namespace

template <>
const Ops<bf16>& cpu_ops<bf16>() {
  static const CpuOpsBf16 ops;
  return ops;
}

}  // namespace mt

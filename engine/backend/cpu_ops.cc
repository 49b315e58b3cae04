// The CPU reference op tables: float and double call the kernels/cpu templates directly; bf16
// (cpu_ops_bf16.cc) widens to fp32 around the same kernels.
#include <cstring>

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

template <typename T>
class CpuOps final : public Ops<T> {
 public:
  void matmul_forward(T* out, const T* inp, const T* w, const T* b, int N, int C, int OC) const override {
    cpu::matmul_forward(out, inp, w, b, N, C, OC);
  }
  void matmul_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, int N, int C,
                       int OC) const override {
    cpu::matmul_backward(dinp, dw, db, dout, inp, w, N, C, OC);
  }
  void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* w, int N, int C, float eps,
                       float offset) const override {
    cpu::rmsnorm_forward(out, rstd, inp, w, N, C, eps, offset);
  }
  void rmsnorm_backward(T* dinp, T* dw, const T* dout, const T* inp, const T* w, const T* rstd, int N, int C,
                        float offset) const override {
    cpu::rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C, offset);
  }
  void qk_norm_forward(T* qkv, T* rstd, const T* raw, const T* wq, const T* wk, const QkNormShape& s, float eps,
                       float offset) const override {
    cpu::qk_norm_forward(qkv, rstd, raw, wq, wk, s, eps, offset);
  }
  void qk_norm_backward(T* draw, T* dwq, T* dwk, const T* dqkv, const T* raw, const T* wq, const T* wk, const T* rstd,
                        const QkNormShape& s, float offset) const override {
    cpu::qk_norm_backward(draw, dwq, dwk, dqkv, raw, wq, wk, rstd, s, offset);
  }
  void rope_forward(T* qkv, const float* f, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                    float scale) const override {
    cpu::rope_forward(qkv, f, pos, B, T_, H, KVH, D, scale);
  }
  void rope_backward(T* dqkv, const float* f, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                     float scale) const override {
    cpu::rope_backward(dqkv, f, pos, B, T_, H, KVH, D, scale);
  }
  void attention_forward(T* out, T* lse, const T* qkv, Documents docs, const AttentionOptions& opt, int B, int T_,
                         int H, int KVH, int D) const override {
    cpu::attention_forward(out, lse, qkv, docs.pos, B, T_, H, KVH, D, opt);
  }
  void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, Documents docs,
                          const AttentionOptions& opt, int B, int T_, int H, int KVH, int D) const override {
    cpu::attention_backward(dqkv, dout, qkv, out, lse, docs.pos, B, T_, H, KVH, D, opt);
  }
  void swiglu_forward(T* out, const T* gu, int N, int F, Activation act) const override {
    cpu::swiglu_forward(out, gu, N, F, act);
  }
  void swiglu_backward(T* dgu, const T* dout, const T* gu, int N, int F, Activation act) const override {
    cpu::swiglu_backward(dgu, dout, gu, N, F, act);
  }
  void attention_sinks_forward(T* out, T* lse, const T* sinks, int B, int T_, int H, int D) const override {
    cpu::attention_sinks_forward(out, lse, sinks, B, T_, H, D);
  }
  void attention_sinks_backward(T* dsinks, const T* dout, const T* out, const T* lse, const T* sinks, int B, int T_,
                                int H, int D) const override {
    cpu::attention_sinks_backward(dsinks, dout, out, lse, sinks, B, T_, H, D);
  }
  void moe_route_forward(int32_t* idx, T* w, T* stats, const T* logits, const RouterShape& s) const override {
    cpu::moe_route_forward(idx, w, stats, logits, s);
  }
  void moe_route_backward(T* dlogits, const T* dw, const T* logits, const int32_t* idx, const T* w, const T* counts,
                          T aux_scale, const RouterShape& s) const override {
    cpu::moe_route_backward(dlogits, dw, logits, idx, w, counts, aux_scale, s);
  }
  void moe_sort(int32_t* rows, int32_t* offsets, const int32_t* idx, int N, int E, int k) const override {
    cpu::moe_sort(rows, offsets, idx, N, E, k);
  }
  void moe_gather(T* out, const T* x, const int32_t* rows, int n, int C, int k) const override {
    cpu::moe_gather(out, x, rows, n, C, k);
  }
  void moe_scatter(T* out, const T* y, const int32_t* rows, const T* w, int n, int C, int k) const override {
    cpu::moe_scatter(out, y, rows, w, n, C, k);
  }
  void moe_weight_backward(T* dw, T* dh, T* dy, const T* h, const T* b, const int32_t* rows, const T* w, int n, int F,
                           int C) const override {
    cpu::moe_weight_backward(dw, dh, dy, h, b, rows, w, n, F, C);
  }
  void sigmoid_gate_forward(T* out, const T* y, const T* g, int N, int C) const override {
    cpu::sigmoid_gate_forward(out, y, g, N, C);
  }
  void sigmoid_gate_backward(T* dy, T* dg, const T* dout, const T* y, const T* g, int N, int C) const override {
    cpu::sigmoid_gate_backward(dy, dg, dout, y, g, N, C);
  }
  void embedding_forward(T* out, const int32_t* tokens, const T* wte, int N, int C) const override {
    cpu::embedding_forward(out, tokens, wte, N, C);
  }
  void embedding_backward(T* dwte, const T* dout, const int32_t* tokens, int N, int C) const override {
    cpu::embedding_backward(dwte, dout, tokens, N, C);
  }
  void lm_head_loss(T* dx, T* dW, T* losses, const T* x, const T* W, const int32_t* targets, int N, int C, int V,
                    int chunk, T grad_scale, float softcap, void* scratch, double* totals) const override {
    const auto r = cpu::lm_head_loss(dx, dW, losses, x, W, targets, N, C, V, chunk, grad_scale, static_cast<T*>(scratch),
                                     softcap);
    totals[0] = r.loss_sum;
    totals[1] = double(r.counted);
  }
  void add_inplace(T* y, const T* x, size_t n) const override {
    for (size_t i = 0; i < n; ++i) y[i] += x[i];
  }
  void scale_inplace(T* y, float s, size_t n) const override {
    for (size_t i = 0; i < n; ++i) y[i] *= T(s);
  }
  void copy_bytes(void* dst, const void* src, size_t bytes) const override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void zero_bytes(void* dst, size_t bytes) const override {
    if (bytes) std::memset(dst, 0, bytes);
  }
};

}  // namespace

const char* precision_name(Precision p) { return p == Precision::kBf16 ? "bf16" : "fp32"; }
size_t compute_elem_bytes(Precision p) { return p == Precision::kBf16 ? sizeof(bf16) : sizeof(float); }

template <typename T>
const Ops<T>& cpu_ops() {
  static const CpuOps<T> ops;
  return ops;
}

template const Ops<float>& cpu_ops<float>();
template const Ops<double>& cpu_ops<double>();

}  // namespace mt

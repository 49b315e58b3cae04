#include "engine/backend/cuda/cuda_ops.h"

#include <cstdio>
#include <string>
#include <type_traits>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_sinks.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/lm_head_loss.cuh"
#include "kernels/cuda/moe.cuh"
#include "kernels/cuda/qk_norm.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/swiglu.cuh"
#include "kernels/cuda/util.cuh"

namespace mt {

namespace {

// The kernels' name for an element type: __nv_bfloat16 for mt::bf16, float for float.
template <typename T>
struct DeviceType {
  using type = T;
};
template <>
struct DeviceType<bf16> {
  using type = __nv_bfloat16;
};
template <typename T>
typename DeviceType<T>::type* dev(T* p) {
  return reinterpret_cast<typename DeviceType<T>::type*>(p);
}
template <typename T>
const typename DeviceType<T>::type* dev(const T* p) {
  return reinterpret_cast<const typename DeviceType<T>::type*>(p);
}

}  // namespace

CudaOpContext::~CudaOpContext() {
  if (temp_ && bind_device(device_, nullptr)) cudaFreeAsync(temp_, stream_);
}

void* CudaOpContext::temp(size_t bytes) {
  if (bytes <= temp_bytes_) return temp_;
  if (temp_ && !errors_.note(cudaFreeAsync(temp_, stream_), "cudaFreeAsync(op scratch)")) return nullptr;
  temp_ = nullptr;
  temp_bytes_ = 0;
  const size_t want = bytes + bytes / 2;  // some headroom: grows rarely
  if (!errors_.note(cudaMallocAsync(&temp_, want, stream_), "cudaMallocAsync(op scratch)")) return nullptr;
  temp_bytes_ = want;
  return temp_;
}

cuda::CudnnAttention* CudaOpContext::cudnn_for(const cuda::AttentionShape& s, const Documents& docs) {
  if (!cudnn_) return nullptr;
  std::string why;  // only a refusal writes it: nothing is allocated per accepted call
  if (docs.pos && !docs.spans) why = "packed documents without their spans";
  else if (cudnn_->supports(s, docs.pos ? docs.spans : nullptr, &why)) return cudnn_;
  if (!warned_) {
    warned_ = true;
    std::fprintf(stderr, "megatrain: warning: attention B=%d T=%d H=%d KVH=%d D=%d runs on our own kernel: %s\n", s.B,
                 s.T, s.H, s.KVH, s.D, why.c_str());
  }
  return nullptr;
}

template <typename T>
void CudaOps<T>::matmul_forward(T* out, const T* inp, const T* w, const T* b, int N, int C, int OC) const {
  if (!ctx_.bind()) return;
  ctx_.note(cuda::matmul_forward(dev(out), dev(inp), dev(w), dev(b), N, C, OC, ctx_.gemm(), ctx_.stream()),
            "matmul_forward");
}
template <typename T>
void CudaOps<T>::matmul_backward(T* dinp, A* dw, A* db, const T* dout, const T* inp, const T* w, int N, int C,
                                 int OC) const {
  if (!ctx_.bind()) return;
  ctx_.note(cuda::matmul_backward(dev(dinp), dw, db, dev(dout), dev(inp), dev(w), N, C, OC, ctx_.gemm(), ctx_.stream()),
            "matmul_backward");
}
template <typename T>
void CudaOps<T>::rmsnorm_forward(T* out, A* rstd, const T* inp, const T* w, int N, int C, float eps,
                                 float offset) const {
  if (!ctx_.bind()) return;
  ctx_.note(cuda::rmsnorm_forward(dev(out), rstd, dev(inp), dev(w), N, C, eps, ctx_.stream(), offset),
            "rmsnorm_forward");
}
template <typename T>
void CudaOps<T>::rmsnorm_backward(T* dinp, A* dw, const T* dout, const T* inp, const T* w, const A* rstd, int N, int C,
                                  float offset) const {
  if (!ctx_.bind()) return;
  float* s = nullptr;
  if (dw) {
    s = static_cast<float*>(ctx_.temp(cuda::rmsnorm_backward_scratch(N, C) * sizeof(float)));
    if (!s) return;
  }
  ctx_.note(cuda::rmsnorm_backward(dev(dinp), dw, dev(dout), dev(inp), dev(w), rstd, N, C, s, ctx_.stream(), offset),
            "rmsnorm_backward");
}
template <typename T>
void CudaOps<T>::qk_norm_forward(T* qkv, A* rstd, const T* raw, const T* wq, const T* wk, const QkNormShape& s,
                                 float eps, float offset) const {
  if (!ctx_.bind()) return;
  ctx_.note(cuda::qk_norm_forward(dev(qkv), rstd, dev(raw), dev(wq), dev(wk), s, eps, offset, ctx_.stream()),
            "qk_norm_forward");
}
template <typename T>
void CudaOps<T>::qk_norm_backward(T* draw, A* dwq, A* dwk, const T* dqkv, const T* raw, const T* wq, const T* wk,
                                  const A* rstd, const QkNormShape& s, float offset) const {
  if (!ctx_.bind()) return;
  float* scratch = nullptr;
  if (dwq || dwk) {
    scratch = static_cast<float*>(ctx_.temp(cuda::qk_norm_backward_scratch(s) * sizeof(float)));
    if (!scratch) return;
  }
  ctx_.note(cuda::qk_norm_backward(dev(draw), dwq, dwk, dev(dqkv), dev(raw), dev(wq), dev(wk), rstd, s, offset, scratch,
                                   ctx_.stream()),
            "qk_norm_backward");
}
template <typename T>
void CudaOps<T>::rope_forward(T* qkv, const float* f, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                              float scale) const {
  if (!ctx_.bind()) return;
  ctx_.note(cuda::rope_forward(dev(qkv), f, pos, B, T_, H, KVH, D, scale, ctx_.stream()), "rope_forward");
}
template <typename T>
void CudaOps<T>::rope_backward(T* dqkv, const float* f, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                               float scale) const {
  if (!ctx_.bind()) return;
  ctx_.note(cuda::rope_backward(dev(dqkv), f, pos, B, T_, H, KVH, D, scale, ctx_.stream()), "rope_backward");
}
template <typename T>
void CudaOps<T>::attention_forward(T* out, A* lse, const T* qkv, Documents docs, const AttentionOptions& opt, int B,
                                   int T_, int H, int KVH, int D) const {
  if (!ctx_.bind()) return;
  if constexpr (std::is_same_v<T, bf16>) {
    const cuda::AttentionShape s{B, T_, H, KVH, D, opt};
    if (cuda::CudnnAttention* c = ctx_.cudnn_for(s, docs)) {
      ctx_.note(c->forward(dev(out), lse, dev(qkv), s, docs.spans, ctx_.stream()), "attention_forward (cuDNN)");
      return;
    }
  }
  ctx_.note(cuda::attention_forward(dev(out), lse, dev(qkv), docs.pos, B, T_, H, KVH, D, ctx_.stream(), opt),
            "attention_forward");
}
template <typename T>
void CudaOps<T>::attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const A* lse, Documents docs,
                                    const AttentionOptions& opt, int B, int T_, int H, int KVH, int D) const {
  if (!ctx_.bind()) return;
  if constexpr (std::is_same_v<T, bf16>) {
    const cuda::AttentionShape s{B, T_, H, KVH, D, opt};
    if (cuda::CudnnAttention* c = ctx_.cudnn_for(s, docs)) {
      ctx_.note(c->backward(dev(dqkv), dev(dout), dev(qkv), dev(out), lse, s, docs.spans, ctx_.stream()),
                "attention_backward (cuDNN)");
      return;
    }
  }
  ctx_.note(cuda::attention_backward(dev(dqkv), dev(dout), dev(qkv), dev(out), lse, docs.pos, B, T_, H, KVH, D,
                                     ctx_.stream(), opt),
            "attention_backward");
}
template <typename T>
void CudaOps<T>::swiglu_forward(T* out, const T* gu, int N, int F, Activation act) const {
  if (!ctx_.bind()) return;
  ctx_.note(cuda::swiglu_forward(dev(out), dev(gu), N, F, ctx_.stream(), act), "swiglu_forward");
}
template <typename T>
void CudaOps<T>::swiglu_backward(T* dgu, const T* dout, const T* gu, int N, int F, Activation act) const {
  if (!ctx_.bind()) return;
  ctx_.note(cuda::swiglu_backward(dev(dgu), dev(dout), dev(gu), N, F, ctx_.stream(), act), "swiglu_backward");
}
template <typename T>
void CudaOps<T>::attention_sinks_forward(T* out, A* lse, const T* sinks, int B, int T_, int H, int D) const {
  if (!ctx_.bind()) return;
  ctx_.note(cuda::attention_sinks_forward(dev(out), lse, dev(sinks), B, T_, H, D, ctx_.stream()),
            "attention_sinks_forward");
}
template <typename T>
void CudaOps<T>::attention_sinks_backward(A* dsinks, const T* dout, const T* out, const A* lse, const T* sinks, int B,
                                          int T_, int H, int D) const {
  if (!ctx_.bind()) return;
  const size_t n = cuda::attention_sinks_backward_scratch(B, T_, H);
  if (n == 0) return;
  auto* scratch = static_cast<float*>(ctx_.temp(n * sizeof(float)));
  if (!scratch) return;
  ctx_.note(cuda::attention_sinks_backward(dsinks, dev(dout), dev(out), lse, dev(sinks), B, T_, H, D, scratch,
                                           ctx_.stream()),
            "attention_sinks_backward");
}
template <typename T>
void CudaOps<T>::moe_route_forward(int32_t* idx, A* w, A* stats, const T* logits, const RouterShape& s) const {
  if (!ctx_.bind()) return;
  float* scratch = nullptr;
  if (stats && s.N > 0) {
    scratch = static_cast<float*>(ctx_.temp(cuda::moe_route_forward_scratch(s) * sizeof(float)));
    if (!scratch) return;
  }
  ctx_.note(cuda::moe_route_forward(idx, w, stats, dev(logits), s, scratch, ctx_.stream()), "moe_route_forward");
}
template <typename T>
void CudaOps<T>::moe_route_backward(T* dlogits, const A* dw, const T* logits, const int32_t* idx, const A* w,
                                    const A* counts, A aux_scale, const RouterShape& s) const {
  if (!ctx_.bind()) return;
  ctx_.note(cuda::moe_route_backward(dev(dlogits), dw, dev(logits), idx, w, counts, aux_scale, s, ctx_.stream()),
            "moe_route_backward");
}
template <typename T>
void CudaOps<T>::moe_sort(int32_t* rows, int32_t* offsets, const int32_t* idx, int N, int E, int k) const {
  if (!ctx_.bind()) return;
  size_t bytes = 0;
  if (!ctx_.note(cuda::moe_sort_scratch(&bytes, N, E, k), "moe_sort")) return;
  void* scratch = nullptr;
  if (bytes > 0 && !(scratch = ctx_.temp(bytes))) return;
  ctx_.note(cuda::moe_sort(rows, offsets, idx, N, E, k, scratch, ctx_.stream()), "moe_sort");
}
template <typename T>
void CudaOps<T>::moe_gather(T* out, const T* x, const int32_t* rows, int n, int C, int k) const {
  if (!ctx_.bind()) return;
  ctx_.note(cuda::moe_gather(dev(out), dev(x), rows, n, C, k, ctx_.stream()), "moe_gather");
}
template <typename T>
void CudaOps<T>::moe_scatter(T* out, const T* y, const int32_t* rows, const A* w, int n, int C, int k) const {
  if (!ctx_.bind()) return;
  ctx_.note(cuda::moe_scatter(dev(out), dev(y), rows, w, n, C, k, ctx_.stream()), "moe_scatter");
}
template <typename T>
void CudaOps<T>::moe_weight_backward(A* dw, T* dh, T* dy, const T* h, const T* b, const int32_t* rows, const A* w, int n,
                                     int F, int C) const {
  if (!ctx_.bind()) return;
  ctx_.note(cuda::moe_weight_backward(dw, dev(dh), dev(dy), dev(h), dev(b), rows, w, n, F, C, ctx_.stream()),
            "moe_weight_backward");
}
template <typename T>
void CudaOps<T>::sigmoid_gate_forward(T* out, const T* y, const T* g, int N, int C) const {
  if (!ctx_.bind()) return;
  ctx_.note(cuda::sigmoid_gate_forward(dev(out), dev(y), dev(g), N, C, ctx_.stream()), "sigmoid_gate_forward");
}
template <typename T>
void CudaOps<T>::sigmoid_gate_backward(T* dy, T* dg, const T* dout, const T* y, const T* g, int N, int C) const {
  if (!ctx_.bind()) return;
  ctx_.note(cuda::sigmoid_gate_backward(dev(dy), dev(dg), dev(dout), dev(y), dev(g), N, C, ctx_.stream()),
            "sigmoid_gate_backward");
}
template <typename T>
void CudaOps<T>::embedding_forward(T* out, const int32_t* tokens, const T* wte, int N, int C) const {
  if (!ctx_.bind()) return;
  ctx_.note(cuda::embedding_forward(dev(out), tokens, dev(wte), N, C, ctx_.stream()), "embedding_forward");
}
template <typename T>
void CudaOps<T>::embedding_backward(A* dwte, const T* dout, const int32_t* tokens, int N, int C) const {
  if (!ctx_.bind()) return;
  ctx_.note(cuda::embedding_backward(dwte, dev(dout), tokens, N, C, ctx_.stream()), "embedding_backward");
}

template <typename T>
void CudaOps<T>::lm_head_loss(T* dx, A* dW, A* losses, const T* x, const T* W, const int32_t* targets, int N, int C,
                              int V, int chunk, A grad_scale, float softcap, void* scratch, double* totals) const {
  if (!ctx_.bind()) return;
  auto* rows = N > 0 ? static_cast<double*>(ctx_.temp(size_t(N) * sizeof(double))) : nullptr;
  if (N > 0 && !rows) return;
  ctx_.note(cuda::lm_head_loss(dev(dx), dW, losses, dev(x), dev(W), targets, N, C, V, chunk, grad_scale, scratch, rows,
                               totals, ctx_.gemm(), ctx_.stream(), softcap),
            "lm_head_loss");
}

template <typename T>
void CudaOps<T>::add_inplace(T* y, const T* x, size_t n) const {
  if (!ctx_.bind()) return;
  ctx_.note(cuda::add_inplace(dev(y), dev(x), n, ctx_.stream()), "add_inplace");
}
template <typename T>
void CudaOps<T>::scale_inplace(T* y, float s, size_t n) const {
  if (!ctx_.bind()) return;
  ctx_.note(cuda::scale_inplace(dev(y), s, n, ctx_.stream()), "scale_inplace");
}
template <typename T>
void CudaOps<T>::copy_bytes(void* dst, const void* src, size_t bytes) const {
  if (!ctx_.bind()) return;
  ctx_.note(cuda::copy_bytes(dst, src, bytes, ctx_.stream()), "copy");
}
template <typename T>
void CudaOps<T>::zero_bytes(void* dst, size_t bytes) const {
  if (!ctx_.bind()) return;
  ctx_.note(cuda::zero_bytes(dst, bytes, ctx_.stream()), "zero");
}

template class CudaOps<float>;
template class CudaOps<bf16>;

}  // namespace mt

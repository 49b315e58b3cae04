// Ops<T>: the op table a backend provides to the layer templates — the kernels/ families behind
// one interface (ggml-style), so one forward/backward code path runs on every backend.
// All pointers are device pointers of that backend; calls are ordered on its compute stream.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/lm_head_loss.h"

namespace mt {

template <typename T>
class Ops {
 public:
  virtual ~Ops() = default;
  virtual void matmul_forward(T* out, const T* inp, const T* w, const T* b, int N, int C, int OC) const = 0;
  virtual void matmul_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, int N, int C,
                               int OC) const = 0;
  virtual void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* w, int N, int C, float eps) const = 0;
  virtual void rmsnorm_backward(T* dinp, T* dw, const T* dout, const T* inp, const T* w, const T* rstd, int N,
                                int C) const = 0;
  virtual void rope_forward(T* qkv, const float* inv_freq, int B, int T_, int H, int KVH, int D) const = 0;
  virtual void rope_backward(T* dqkv, const float* inv_freq, int B, int T_, int H, int KVH, int D) const = 0;
  virtual void attention_forward(T* out, T* lse, const T* qkv, int B, int T_, int H, int KVH, int D) const = 0;
  virtual void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse, int B, int T_,
                                  int H, int KVH, int D) const = 0;
  virtual void swiglu_forward(T* out, const T* gu, int N, int F) const = 0;
  virtual void swiglu_backward(T* dgu, const T* dout, const T* gu, int N, int F) const = 0;
  virtual void embedding_forward(T* out, const int32_t* tokens, const T* wte, int N, int C) const = 0;
  virtual void embedding_backward(T* dwte, const T* dout, const int32_t* tokens, int N, int C) const = 0;
  // As cpu::lm_head_loss; the result stays on the device: totals (device, 2 doubles) receives
  // {sum of losses in token order, counted targets}, for the host to read after an event.
  virtual void lm_head_loss(T* dx, T* dW, T* losses, const T* x, const T* W, const int32_t* targets, int N, int C,
                            int V, int chunk, T grad_scale, T* scratch, double* totals) const = 0;
  virtual void add_inplace(T* y, const T* x, size_t n) const = 0;  // y += x
  virtual void copy(T* dst, const T* src, size_t n) const = 0;
  virtual void zero(T* dst, size_t n) const = 0;
};

// The CPU reference op table (kernels/cpu), for float and double: synchronous, on the calling
// thread (the resident executor and the gradient checks read results right after a call).
template <typename T>
const Ops<T>& cpu_ops();

}  // namespace mt

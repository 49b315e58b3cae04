// CudaOps<T>: the Ops<T> table on the CUDA kernels, for T = float and T = bf16 (mixed
// precision), one class template over both: mt::bf16 goes to the kernels as __nv_bfloat16
// (the same two bytes). In bf16 every kernel reads bf16, computes in fp32 and rounds each bf16
// output once; statistics, weight gradients, logits and losses are fp32 (acc_t<bf16>) — the
// rounding points of the CPU table (cpu_ops_bf16.cc), so the two differ only in summation
// order. Both tables issue on the compute stream and share one CudaOpContext. Failures go to
// the backend's sticky CudaErrors.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "engine/backend/cuda/cuda_errors.h"
#include "engine/backend/ops.h"
#include "kernels/cuda/attention_cudnn.cuh"
#include "kernels/cuda/matmul.cuh"

namespace mt {

static_assert(sizeof(bf16) == sizeof(__nv_bfloat16) && alignof(bf16) == alignof(__nv_bfloat16),
              "mt::bf16 and __nv_bfloat16 must share size and alignment: the op table reinterprets one as the other");

// What the op tables share: the compute stream, the device, the cuBLASLt context, the sticky
// error, and the small op scratch (RMSNorm dweight partials, per-token losses): stream-ordered
// memory (cudaMallocAsync) grown on demand — at most a few MiB, outside the planned arena and
// counted by cuda_fixed_device_bytes. Used from the compute thread only.
class CudaOpContext {
 public:
  CudaOpContext(cudaStream_t stream, int device, cuda::GemmContext& gemm, CudaErrors& errors)
      : stream_(stream), device_(device), gemm_(gemm), errors_(errors) {}
  ~CudaOpContext();
  CudaOpContext(const CudaOpContext&) = delete;
  CudaOpContext& operator=(const CudaOpContext&) = delete;

  // Every op binds the device first: ops run on the compute thread, which may not be the
  // thread that created the backend.
  bool bind() { return bind_device(device_, &errors_); }
  void* temp(size_t bytes);  // op scratch; nullptr on failure (recorded)
  bool note(const cuda::CudaStatus& s, const char* op) { return errors_.note(s, op); }
  cudaStream_t stream() const { return stream_; }
  cuda::GemmContext& gemm() { return gemm_; }
  void set_cudnn(cuda::CudnnAttention* cudnn) { cudnn_ = cudnn; }
  // cuDNN's attention when the backend has it and it takes this call (bf16 only), else nullptr:
  // the call runs on our own kernels, and the first refusal is printed once with its reason.
  // A forward and its backward get the same answer (CudnnAttention::supports).
  cuda::CudnnAttention* cudnn_for(const cuda::AttentionShape& s, const Documents& docs);

 private:
  cudaStream_t stream_;
  int device_;
  cuda::GemmContext& gemm_;
  CudaErrors& errors_;
  void* temp_ = nullptr;
  size_t temp_bytes_ = 0;
  cuda::CudnnAttention* cudnn_ = nullptr;
  bool warned_ = false;
};

template <typename T>
class CudaOps final : public Ops<T> {
 public:
  using A = acc_t<T>;
  explicit CudaOps(CudaOpContext& ctx) : ctx_(ctx) {}

  void matmul_forward(T* out, const T* inp, const T* w, const T* b, int N, int C, int OC) const override;
  void matmul_backward(T* dinp, A* dw, A* db, const T* dout, const T* inp, const T* w, int N, int C,
                       int OC) const override;
  void rmsnorm_forward(T* out, A* rstd, const T* inp, const T* w, int N, int C, float eps,
                       float offset) const override;
  void rmsnorm_backward(T* dinp, A* dw, const T* dout, const T* inp, const T* w, const A* rstd, int N, int C,
                        float offset) const override;
  void qk_norm_forward(T* qkv, A* rstd, const T* raw, const T* wq, const T* wk, const QkNormShape& s, float eps,
                       float offset) const override;
  void qk_norm_backward(T* draw, A* dwq, A* dwk, const T* dqkv, const T* raw, const T* wq, const T* wk, const A* rstd,
                        const QkNormShape& s, float offset) const override;
  void rope_forward(T* qkv, const float* inv_freq, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                    float scale) const override;
  void rope_backward(T* dqkv, const float* inv_freq, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                     float scale) const override;
  void attention_forward(T* out, A* lse, const T* qkv, Documents docs, const AttentionOptions& opt, int B, int T_,
                         int H, int KVH, int D) const override;
  void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const A* lse, Documents docs,
                          const AttentionOptions& opt, int B, int T_, int H, int KVH, int D) const override;
  void swiglu_forward(T* out, const T* gu, int N, int F, Activation act) const override;
  void swiglu_backward(T* dgu, const T* dout, const T* gu, int N, int F, Activation act) const override;
  void attention_sinks_forward(T* out, A* lse, const T* sinks, int B, int T_, int H, int D) const override;
  void attention_sinks_backward(A* dsinks, const T* dout, const T* out, const A* lse, const T* sinks, int B, int T_,
                                int H, int D) const override;
  void moe_route_forward(int32_t* idx, A* w, A* stats, const T* logits, const RouterShape& s) const override;
  void moe_route_backward(T* dlogits, const A* dw, const T* logits, const int32_t* idx, const A* w, const A* counts,
                          A aux_scale, const RouterShape& s) const override;
  void moe_sort(int32_t* rows, int32_t* offsets, const int32_t* idx, int N, int E, int k) const override;
  void moe_gather(T* out, const T* x, const int32_t* rows, int n, int C, int k) const override;
  void moe_scatter(T* out, const T* y, const int32_t* rows, const A* w, int n, int C, int k) const override;
  void moe_weight_backward(A* dw, T* dh, T* dy, const T* h, const T* b, const int32_t* rows, const A* w, int n, int F,
                           int C) const override;
  void sigmoid_gate_forward(T* out, const T* y, const T* g, int N, int C) const override;
  void sigmoid_gate_backward(T* dy, T* dg, const T* dout, const T* y, const T* g, int N, int C) const override;
  void embedding_forward(T* out, const int32_t* tokens, const T* wte, int N, int C) const override;
  void embedding_backward(A* dwte, const T* dout, const int32_t* tokens, int N, int C) const override;
  // Leaves the totals on the device (no synchronisation).
  void lm_head_loss(T* dx, A* dW, A* losses, const T* x, const T* W, const int32_t* targets, int N, int C, int V,
                    int chunk, A grad_scale, float softcap, void* scratch, double* totals) const override;
  void add_inplace(T* y, const T* x, size_t n) const override;
  void scale_inplace(T* y, float s, size_t n) const override;
  void copy_bytes(void* dst, const void* src, size_t bytes) const override;
  void zero_bytes(void* dst, size_t bytes) const override;

 private:
  CudaOpContext& ctx_;
};

extern template class CudaOps<float>;
extern template class CudaOps<bf16>;

}  // namespace mt

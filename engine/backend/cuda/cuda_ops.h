// CudaOps: the Ops<float> table on the CUDA kernels, issued on one stream. Failures go to the
// backend's sticky CudaErrors. Small op scratch (RMSNorm dweight partials, per-token losses)
// is stream-ordered memory (cudaMallocAsync) grown on demand — at most a few MiB, outside the
// planned arena.
#pragma once
#include <cuda_runtime.h>

#include <memory>

#include "engine/backend/cuda/cuda_errors.h"
#include "engine/backend/ops.h"
#include "kernels/cuda/matmul.cuh"

namespace mt {

class CudaOps final : public Ops<float> {
 public:
  // Every op binds `device` first: ops run on the compute thread, which may not be the thread
  // that created the backend.
  CudaOps(cudaStream_t stream, int device, cuda::GemmContext& gemm, CudaErrors& errors)
      : stream_(stream), device_(device), gemm_(gemm), errors_(errors) {}
  ~CudaOps() override;

  void matmul_forward(float* out, const float* inp, const float* w, const float* b, int N, int C, int OC) const override;
  void matmul_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w, int N,
                       int C, int OC) const override;
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int N, int C,
                       float eps) const override;
  void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, const float* rstd,
                        int N, int C) const override;
  void rope_forward(float* qkv, const float* inv_freq, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                    float scale) const override;
  void rope_backward(float* dqkv, const float* inv_freq, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                     float scale) const override;
  void attention_forward(float* out, float* lse, const float* qkv, const int32_t* pos, int B, int T_, int H, int KVH,
                         int D) const override;
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                          const int32_t* pos, int B, int T_, int H, int KVH, int D) const override;
  void swiglu_forward(float* out, const float* gu, int N, int F) const override;
  void swiglu_backward(float* dgu, const float* dout, const float* gu, int N, int F) const override;
  void embedding_forward(float* out, const int32_t* tokens, const float* wte, int N, int C) const override;
  void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int N, int C) const override;
  // Leaves the totals on the device (no synchronisation).
  void lm_head_loss(float* dx, float* dW, float* losses, const float* x, const float* W, const int32_t* targets, int N,
                    int C, int V, int chunk, float grad_scale, float* scratch, double* totals) const override;
  void add_inplace(float* y, const float* x, size_t n) const override;
  void copy(float* dst, const float* src, size_t n) const override;
  void zero(float* dst, size_t n) const override;

 private:
  void* temp(size_t bytes) const;  // op scratch; nullptr on failure (recorded)
  bool bind() const { return bind_device(device_, &errors_); }

  cudaStream_t stream_;
  int device_;
  cuda::GemmContext& gemm_;
  CudaErrors& errors_;
  mutable void* temp_ = nullptr;
  mutable size_t temp_bytes_ = 0;
};

}  // namespace mt

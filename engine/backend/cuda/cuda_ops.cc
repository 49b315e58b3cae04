#include "engine/backend/cuda/cuda_ops.h"

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/lm_head_loss.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/swiglu.cuh"
#include "kernels/cuda/util.cuh"

namespace mt {

CudaOps::~CudaOps() {
  if (temp_ && bind_device(device_, nullptr)) cudaFreeAsync(temp_, stream_);
}

void* CudaOps::temp(size_t bytes) const {
  if (bytes <= temp_bytes_) return temp_;
  if (temp_ && !errors_.note(cudaFreeAsync(temp_, stream_), "cudaFreeAsync(op scratch)")) return nullptr;
  temp_ = nullptr;
  temp_bytes_ = 0;
  const size_t want = bytes + bytes / 2;  // some headroom: grows rarely
  if (!errors_.note(cudaMallocAsync(&temp_, want, stream_), "cudaMallocAsync(op scratch)")) return nullptr;
  temp_bytes_ = want;
  return temp_;
}

void CudaOps::matmul_forward(float* out, const float* inp, const float* w, const float* b, int N, int C,
                             int OC) const {
  if (!bind()) return;
  errors_.note(cuda::matmul_forward(out, inp, w, b, N, C, OC, gemm_, stream_), "matmul_forward");
}
void CudaOps::matmul_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                              int N, int C, int OC) const {
  if (!bind()) return;
  errors_.note(cuda::matmul_backward(dinp, dw, db, dout, inp, w, N, C, OC, gemm_, stream_), "matmul_backward");
}
void CudaOps::rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int N, int C,
                              float eps) const {
  if (!bind()) return;
  errors_.note(cuda::rmsnorm_forward(out, rstd, inp, w, N, C, eps, stream_), "rmsnorm_forward");
}
void CudaOps::rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                               const float* rstd, int N, int C) const {
  if (!bind()) return;
  float* s = nullptr;
  if (dw) {
    s = static_cast<float*>(temp(cuda::rmsnorm_backward_scratch(N, C) * sizeof(float)));
    if (!s) return;
  }
  errors_.note(cuda::rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C, s, stream_), "rmsnorm_backward");
}
void CudaOps::rope_forward(float* qkv, const float* f, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                           float scale) const {
  if (!bind()) return;
  errors_.note(cuda::rope_forward(qkv, f, pos, B, T_, H, KVH, D, scale, stream_), "rope_forward");
}
void CudaOps::rope_backward(float* dqkv, const float* f, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                            float scale) const {
  if (!bind()) return;
  errors_.note(cuda::rope_backward(dqkv, f, pos, B, T_, H, KVH, D, scale, stream_), "rope_backward");
}
void CudaOps::attention_forward(float* out, float* lse, const float* qkv, const int32_t* pos, int B, int T_, int H,
                                int KVH, int D) const {
  if (!bind()) return;
  errors_.note(cuda::attention_forward(out, lse, qkv, pos, B, T_, H, KVH, D, stream_), "attention_forward");
}
void CudaOps::attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                                 const int32_t* pos, int B, int T_, int H, int KVH, int D) const {
  if (!bind()) return;
  errors_.note(cuda::attention_backward(dqkv, dout, qkv, out, lse, pos, B, T_, H, KVH, D, stream_),
               "attention_backward");
}
void CudaOps::swiglu_forward(float* out, const float* gu, int N, int F) const {
  if (!bind()) return;
  errors_.note(cuda::swiglu_forward(out, gu, N, F, stream_), "swiglu_forward");
}
void CudaOps::swiglu_backward(float* dgu, const float* dout, const float* gu, int N, int F) const {
  if (!bind()) return;
  errors_.note(cuda::swiglu_backward(dgu, dout, gu, N, F, stream_), "swiglu_backward");
}
void CudaOps::embedding_forward(float* out, const int32_t* tokens, const float* wte, int N, int C) const {
  if (!bind()) return;
  errors_.note(cuda::embedding_forward(out, tokens, wte, N, C, stream_), "embedding_forward");
}
void CudaOps::embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int N, int C) const {
  if (!bind()) return;
  errors_.note(cuda::embedding_backward(dwte, dout, tokens, N, C, stream_), "embedding_backward");
}

void CudaOps::lm_head_loss(float* dx, float* dW, float* losses, const float* x, const float* W, const int32_t* targets,
                           int N, int C, int V, int chunk, float grad_scale, float* scratch, double* totals) const {
  if (!bind()) return;
  auto* rows = N > 0 ? static_cast<double*>(temp(size_t(N) * sizeof(double))) : nullptr;
  if (N > 0 && !rows) return;
  errors_.note(cuda::lm_head_loss(dx, dW, losses, x, W, targets, N, C, V, chunk, grad_scale, scratch, rows, totals,
                                  gemm_, stream_),
               "lm_head_loss");
}

void CudaOps::add_inplace(float* y, const float* x, size_t n) const {
  if (!bind()) return;
  errors_.note(cuda::add_inplace(y, x, n, stream_), "add_inplace");
}
void CudaOps::copy(float* dst, const float* src, size_t n) const {
  if (!bind()) return;
  errors_.note(cuda::copy(dst, src, n, stream_), "copy");
}
void CudaOps::zero(float* dst, size_t n) const {
  if (!bind()) return;
  errors_.note(cuda::zero(dst, n, stream_), "zero");
}

}  // namespace mt

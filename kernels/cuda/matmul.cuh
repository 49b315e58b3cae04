// CUDA dense layers (kernels/matmul.h contract): row-major, out = inp @ weight^T (+ bias).
// GEMMs run through cuBLASLt with fp32 accumulation (CUBLAS_COMPUTE_32F): T = float is strict
// fp32 (no TF32); T = __nv_bfloat16 has bf16 inputs and activation outputs, rounded once from
// the fp32 result, while weight gradients G are fp32 (bf16 A/B, fp32 C, beta = 1), so they
// accumulate across micro-batches without rounding. Handle, workspace and the per-shape
// algorithm cache live in a GemmContext (one per compute stream; not thread-safe) — no globals.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <memory>

#include "kernels/cuda/status.cuh"

namespace mt::cuda {

class GemmContext {
 public:
  static CudaStatus create(std::unique_ptr<GemmContext>& out, size_t workspace_bytes = size_t(32) << 20);
  ~GemmContext();
  GemmContext(const GemmContext&) = delete;
  GemmContext& operator=(const GemmContext&) = delete;
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  GemmContext();
  std::unique_ptr<Impl> impl_;
};

// C[M,N] = alpha * op(A) @ op(B) + beta * C (row-major, leading dimensions given), products
// and sums in fp32; C is read (beta != 0) and written once in its own type TC. Instantiated for
// (float, float), (bf16, bf16) and (bf16, float).
template <typename T, typename TC = T>
CudaStatus gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const T* A, int lda,
                const T* B, int ldb, float beta, TC* C, int ldc, GemmContext& ctx, cudaStream_t stream);

// out = inp @ weight^T + bias (bias may be nullptr). out [N, OC] is overwritten.
template <typename T>
CudaStatus matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC,
                          GemmContext& ctx, cudaStream_t stream);

// Accumulating: dinp += dout @ weight, dweight += dout^T @ inp, dbias += column sums of dout
// (row order, deterministic). Any of dinp, dweight, dbias may be nullptr. G (the gradient
// type) is float: instantiated for (float, float) and (bf16, float).
template <typename T, typename G>
CudaStatus matmul_backward(T* dinp, G* dweight, G* dbias, const T* dout, const T* inp, const T* weight,
                           int N, int C, int OC, GemmContext& ctx, cudaStream_t stream);

}  // namespace mt::cuda

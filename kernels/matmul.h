// Dense layers: out = inp @ weight^T (+ bias), the PyTorch nn.Linear convention.
// Row-major: inp [N, C], weight [OC, C], bias [OC] or nullptr, out [N, OC].
#pragma once

#include "kernels/bf16.h"

namespace mt::cpu {

// out = inp @ weight^T + bias (out is overwritten).
template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC);

// Accumulating backward (+=, so micro-batches and fused projections add up):
//   dinp += dout @ weight, dweight += dout^T @ inp, dbias += column sums of dout.
// Any of dinp, dweight, dbias may be nullptr to skip it.
template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int N, int C, int OC);

// General row-major GEMM used by the two above and by fused kernels:
//   C[M,N] = alpha * op(A) @ op(B) + beta * C, with op(X) = X or X^T, leading dimensions given.
template <typename T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda,
          const T* B, int ldb, T beta, T* C, int ldc);

// The portable cache-blocked GEMM behind `gemm` when no BLAS is built in (same contract);
// exposed so tests can compare it with the BLAS path.
template <typename T>
void gemm_blocked(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda,
                  const T* B, int ldb, T beta, T* C, int ldc);

// Mixed precision: C (fp32) = alpha * op(A) @ op(B) + beta * C with bf16 A and B, products
// and sums in fp32 — what cuBLASLt does with bf16 inputs, an fp32 compute type and an fp32 C.
// The result equals gemm<float> on the inputs widened to fp32, up to summation order.
void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const bf16* A, int lda,
               const bf16* B, int ldb, float beta, float* C, int ldc);

}  // namespace mt::cpu

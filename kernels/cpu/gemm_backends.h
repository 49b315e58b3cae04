// Private to kernels/cpu: the GEMM backends behind gemm<float> and gemm_bf16, and which one
// runs (chosen by gemm_provider.cc). Row-major, the contract of kernels/matmul.h.
#pragma once
#include <string>

#include "kernels/bf16.h"

namespace mt::cpu::detail {

enum class Sgemm { kBlocked, kOpenblas, kOnednn };
enum class GemmBf16 { kPortable, kOnednn };

Sgemm sgemm_backend();
GemmBf16 gemm_bf16_backend();

#ifdef MEGATRAIN_HAVE_ONEDNN
// false when oneDNN refused the call (the caller then runs the portable path).
bool onednn_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                  const float* B, int ldb, float beta, float* C, int ldc);
bool onednn_gemm_bf16(bool ta, bool tb, int M, int N, int K, float alpha, const bf16* A, int lda,
                      const bf16* B, int ldb, float beta, float* C, int ldc);
std::string onednn_version();
std::string onednn_isa();          // the ISA oneDNN's JIT targets here, e.g. "avx512_core_bf16"
std::string onednn_bf16_kernel();  // the matmul implementation for bf16 x bf16 -> f32
#endif

}  // namespace mt::cpu::detail

// gemm_bf16: bf16 inputs, fp32 products and output. oneDNN's bf16 matmul where it is native
// (kernels/gemm_provider.h); the portable path widens the operands to fp32 (exact: every bf16
// is a float) and runs the fp32 GEMM. Both give gemm<float> on the widened inputs up to the
// order of the fp32 sums.
#include <vector>

#include "kernels/cpu/common.h"
#include "kernels/cpu/gemm_backends.h"
#include "kernels/matmul.h"

namespace mt::cpu {
namespace {

// The rows x cols block of a row-major bf16 matrix with leading dimension ld, widened.
std::vector<float> widen(const bf16* X, int rows, int cols, int ld) {
  std::vector<float> out(size_t(rows) * size_t(cols));
  MT_OMP(parallel for schedule(static) if (detail::worth_parallel(long(rows) * cols)))
  for (int r = 0; r < rows; ++r)
    widen_bf16(out.data() + size_t(r) * size_t(cols), X + long(r) * ld, size_t(cols));
  return out;
}

}  // namespace

void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const bf16* A, int lda,
               const bf16* B, int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
#ifdef MEGATRAIN_HAVE_ONEDNN
  if (K > 0 && detail::gemm_bf16_backend() == detail::GemmBf16::kOnednn &&
      detail::onednn_gemm_bf16(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
    return;
#endif
  const int a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
  const int b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
  const std::vector<float> a = K > 0 ? widen(A, a_rows, a_cols, lda) : std::vector<float>();
  const std::vector<float> b = K > 0 ? widen(B, b_rows, b_cols, ldb) : std::vector<float>();
  gemm<float>(trans_a, trans_b, M, N, K, alpha, a.data(), a_cols, b.data(), b_cols, beta, C, ldc);
}

}  // namespace mt::cpu

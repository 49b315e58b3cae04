// gemm_bf16 (bf16 A and B, fp32 products, sums and C) for every bf16 provider linked in
// (oneDNN's matmul where built with it, the portable widen-then-sgemm path always), against a
// double-precision GEMM and gemm<float> on the same bf16 values widened to fp32.
//
// Tolerance: a product of two bf16 values (8-bit significands) is exact in fp32 (24 bits), so
// the only error is the fp32 rounding of the K-term sum (and of alpha and beta's products),
// whatever order a provider sums in. The classical bound for a K-term sum is
// K * u * sum|a_k b_k| with u = eps_fp32 / 2; we allow (K + 2) * eps_fp32 * (|alpha| sum_k
// |a_ik b_kj| + |beta c_ij|): twice that, plus the two roundings of alpha and beta. Inputs are
// kept well inside the normal range, since native bf16 instructions (VDPBF16PS) flush
// denormals.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/gemm_provider.h"
#include "kernels/matmul.h"
#include "tests/kernels/test_util.h"

namespace mt::cpu {
namespace {

constexpr double kEps32 = 1.1920928955078125e-07;  // 2^-23

class ScopedBf16Provider {
 public:
  explicit ScopedBf16Provider(const std::string& name) : ok_(use_gemm_bf16_provider(name)) {}
  ~ScopedBf16Provider() { use_gemm_bf16_provider(gemm_bf16_provider().name); }
  bool ok() const { return ok_; }

 private:
  bool ok_;
};

struct Case {
  bool ta, tb;
  int M, N, K;
  float alpha, beta;
};

std::vector<bf16> random_bf16(size_t n, uint32_t seed) {
  const auto v = test::random_vec<float>(n, seed, -2.0, 2.0);
  std::vector<bf16> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = float_to_bf16(v[i]);
  return out;
}

std::vector<float> widen(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_float(v[i]);
  return out;
}

// Runs one case on the current provider with padded leading dimensions and checks every
// element of C against double, the fp32 GEMM on the widened inputs, and the padding.
void check_case(const Case& g) {
  SCOPED_TRACE(testing::Message() << g.ta << g.tb << " " << g.M << "x" << g.N << "x" << g.K
                                  << " alpha " << g.alpha << " beta " << g.beta);
  const int lda = (g.ta ? g.M : g.K) + 3, ldb = (g.tb ? g.K : g.N) + 5, ldc = g.N + 2;
  const auto A = random_bf16(size_t(g.ta ? g.K : g.M) * lda, 1);
  const auto B = random_bf16(size_t(g.tb ? g.N : g.K) * ldb, 2);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // beta = 0: C is poisoned with NaN, which must not reach the result (BLAS semantics).
  std::vector<float> C0 = g.beta == 0.0f ? std::vector<float>(size_t(g.M) * ldc, nan)
                                         : test::random_vec<float>(size_t(g.M) * ldc, 3);
  std::vector<float> C = C0, Cf = C0;
  gemm_bf16(g.ta, g.tb, g.M, g.N, g.K, g.alpha, A.data(), lda, B.data(), ldb, g.beta, C.data(), ldc);
  const auto Aw = widen(A), Bw = widen(B);
  gemm<float>(g.ta, g.tb, g.M, g.N, g.K, g.alpha, Aw.data(), lda, Bw.data(), ldb, g.beta, Cf.data(), ldc);
  int bad = 0;
  for (int i = 0; i < g.M; ++i)
    for (int j = 0; j < ldc; ++j) {
      const size_t idx = size_t(i) * ldc + j;
      if (j >= g.N) {  // the padding of C is never written
        ASSERT_EQ(std::bit_cast<uint32_t>(C[idx]), std::bit_cast<uint32_t>(C0[idx])) << i << "," << j;
        continue;
      }
      double sum = 0, abs_sum = 0;
      for (int k = 0; k < g.K; ++k) {
        const double a = g.ta ? Aw[size_t(k) * lda + i] : Aw[size_t(i) * lda + k];
        const double b = g.tb ? Bw[size_t(j) * ldb + k] : Bw[size_t(k) * ldb + j];
        sum += a * b;
        abs_sum += std::abs(a * b);
      }
      const double c0 = g.beta == 0.0f ? 0.0 : double(C0[idx]);
      const double want = double(g.alpha) * sum + double(g.beta) * c0;
      const double tol = (g.K + 2) * kEps32 * (std::abs(g.alpha) * abs_sum + std::abs(g.beta * c0)) + 1e-30;
      const bool ok = std::isfinite(C[idx]) && std::abs(C[idx] - want) <= tol &&
                      std::abs(double(C[idx]) - double(Cf[idx])) <= 2 * tol;
      if (!ok && ++bad <= 5)
        ADD_FAILURE() << "C[" << i << "," << j << "] = " << C[idx] << ", want " << want
                      << " (fp32 GEMM " << Cf[idx] << ", tolerance " << tol << ")";
    }
  EXPECT_EQ(bad, 0);
}

const Case kCases[] = {
    {false, false, 1, 1, 1, 1.0f, 0.0f},      {false, true, 7, 33, 130, 1.0f, 0.0f},
    {true, false, 33, 7, 130, 0.75f, 1.0f},   {true, true, 130, 33, 7, 1.0f, 1.0f},
    {false, false, 130, 130, 33, -0.5f, 1.0f}, {false, true, 1, 130, 7, 1.0f, 1.0f},
    {true, false, 7, 1, 33, 2.0f, 0.0f},      {true, true, 33, 130, 1, 1.0f, 0.5f},
    {false, true, 64, 96, 512, 1.0f, 1.0f},   {true, false, 96, 64, 777, 1.0f, 0.0f}};

TEST(GemmBf16, EveryProviderMatchesDoubleOnWidenedInputs) {
  for (const std::string& p : linked_gemm_bf16_providers()) {
    SCOPED_TRACE(p);
    ScopedBf16Provider use(p);
    ASSERT_TRUE(use.ok());
    for (const Case& g : kCases) check_case(g);
  }
}

// The portable path is gemm<float> on the widened inputs exactly (same provider, same order).
TEST(GemmBf16, PortablePathIsTheFp32GemmBitForBit) {
  ScopedBf16Provider use("portable");
  ASSERT_TRUE(use.ok());
  const int M = 37, N = 29, K = 53;
  const auto A = random_bf16(size_t(M) * K, 7), B = random_bf16(size_t(N) * K, 8);
  std::vector<float> C(size_t(M) * N, 0.25f), Cf = C;
  gemm_bf16(false, true, M, N, K, 1.0f, A.data(), K, B.data(), K, 1.0f, C.data(), N);
  const auto Aw = widen(A), Bw = widen(B);
  gemm<float>(false, true, M, N, K, 1.0f, Aw.data(), K, Bw.data(), K, 1.0f, Cf.data(), N);
  for (size_t i = 0; i < C.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(C[i]), std::bit_cast<uint32_t>(Cf[i])) << i;
}

TEST(GemmBf16, EveryProviderIsDeterministic) {
  const int M = 200, N = 96, K = 1000;
  const auto A = random_bf16(size_t(K) * M, 9), B = random_bf16(size_t(K) * N, 10);
  for (const std::string& p : linked_gemm_bf16_providers()) {
    SCOPED_TRACE(p);
    ScopedBf16Provider use(p);
    ASSERT_TRUE(use.ok());
    std::vector<float> c1(size_t(M) * N, 1.0f), c2 = c1;
    gemm_bf16(true, false, M, N, K, 1.0f, A.data(), M, B.data(), N, 1.0f, c1.data(), N);
    gemm_bf16(true, false, M, N, K, 1.0f, A.data(), M, B.data(), N, 1.0f, c2.data(), N);
    for (size_t i = 0; i < c1.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(c1[i]), std::bit_cast<uint32_t>(c2[i])) << i;
  }
}

// K = 0 scales C by beta (no products); M or N = 0 touches nothing.
TEST(GemmBf16, DegenerateShapes) {
  const auto A = random_bf16(16, 11), B = random_bf16(16, 12);
  for (const std::string& p : linked_gemm_bf16_providers()) {
    SCOPED_TRACE(p);
    ScopedBf16Provider use(p);
    std::vector<float> C(12, 2.0f);
    gemm_bf16(false, false, 3, 4, 0, 1.0f, A.data(), 1, B.data(), 4, 0.5f, C.data(), 4);
    for (float c : C) EXPECT_EQ(c, 1.0f);
    gemm_bf16(false, false, 0, 4, 4, 1.0f, A.data(), 4, B.data(), 4, 0.0f, C.data(), 4);
    gemm_bf16(false, false, 3, 0, 4, 1.0f, A.data(), 4, B.data(), 4, 0.0f, C.data(), 4);
    for (float c : C) EXPECT_EQ(c, 1.0f);
  }
}

TEST(GemmBf16, UnknownProviderIsRefused) { EXPECT_FALSE(use_gemm_bf16_provider("sbgemm")); }

}  // namespace
}  // namespace mt::cpu

// GEMM against a naive triple loop (all transpose combinations, odd sizes, padded leading
// dimensions), the BLAS path against the blocked fallback, and matmul_forward with bias.
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

using test::random_vec;

struct GemmCase {
  bool ta, tb;
  int M, N, K;
};

// C = alpha op(A) op(B) + beta C in double, for op(A) [M, K], op(B) [K, N].
std::vector<double> naive_gemm(const GemmCase& g, double alpha, const std::vector<double>& A,
                               int lda, const std::vector<double>& B, int ldb, double beta,
                               std::vector<double> C, int ldc) {
  for (int i = 0; i < g.M; ++i)
    for (int j = 0; j < g.N; ++j) {
      double s = 0;
      for (int k = 0; k < g.K; ++k) {
        const double a = g.ta ? A[size_t(k) * lda + i] : A[size_t(i) * lda + k];
        const double b = g.tb ? B[size_t(j) * ldb + k] : B[size_t(k) * ldb + j];
        s += a * b;
      }
      C[size_t(i) * ldc + j] = alpha * s + beta * C[size_t(i) * ldc + j];
    }
  return C;
}

template <typename T, typename Fn>
void check_gemm(const GemmCase& g, Fn fn, double tol) {
  const int lda = (g.ta ? g.M : g.K) + 3, ldb = (g.tb ? g.K : g.N) + 2, ldc = g.N + 5;
  const int a_rows = g.ta ? g.K : g.M, b_rows = g.tb ? g.N : g.K;
  const auto A = random_vec(size_t(a_rows) * lda, 1), B = random_vec(size_t(b_rows) * ldb, 2);
  const auto C0 = random_vec(size_t(g.M) * ldc, 3);
  const double alpha = 0.75, beta = -0.5;
  const auto want = naive_gemm(g, alpha, A, lda, B, ldb, beta, C0, ldc);
  std::vector<T> At(A.begin(), A.end()), Bt(B.begin(), B.end()), C(C0.begin(), C0.end());
  fn(g.ta, g.tb, g.M, g.N, g.K, T(alpha), At.data(), lda, Bt.data(), ldb, T(beta), C.data(), ldc);
  double max_err = 0;
  for (int i = 0; i < g.M; ++i)
    for (int j = 0; j < ldc; ++j) {
      const size_t idx = size_t(i) * ldc + j;
      if (j >= g.N) {
        EXPECT_EQ(double(C[idx]), double(T(C0[idx]))) << "padding of C was written";
        continue;
      }
      max_err = std::max(max_err, std::abs(double(C[idx]) - want[idx]));
    }
  EXPECT_LT(max_err, tol * std::sqrt(double(g.K))) << g.ta << g.tb << " " << g.M << "x" << g.N
                                                   << "x" << g.K;
}

const GemmCase kCases[] = {
    {false, false, 37, 29, 53}, {false, true, 37, 29, 53}, {true, false, 37, 29, 53},
    {true, true, 37, 29, 53},   {false, true, 1, 1, 1},    {true, false, 130, 300, 260},
    {false, false, 67, 257, 129}, {true, true, 65, 17, 300}};

TEST(Gemm, DoubleMatchesNaive) {
  for (const auto& g : kCases) {
    check_gemm<double>(g, gemm<double>, 1e-13);
    check_gemm<double>(g, gemm_blocked<double>, 1e-13);
  }
}

TEST(Gemm, FloatMatchesNaive) {
  for (const auto& g : kCases) {
    check_gemm<float>(g, gemm<float>, 2e-6);
    check_gemm<float>(g, gemm_blocked<float>, 2e-6);
  }
}

TEST(Gemm, BlasAndBlockedAgree) {
  const GemmCase g{false, true, 96, 200, 150};
  const auto A = random_vec<float>(size_t(g.M) * g.K, 9);
  const auto B = random_vec<float>(size_t(g.N) * g.K, 10);
  std::vector<float> c1(size_t(g.M) * g.N, 0.f), c2 = c1;
  gemm<float>(false, true, g.M, g.N, g.K, 1.f, A.data(), g.K, B.data(), g.K, 0.f, c1.data(), g.N);
  gemm_blocked<float>(false, true, g.M, g.N, g.K, 1.f, A.data(), g.K, B.data(), g.K, 0.f,
                      c2.data(), g.N);
  for (size_t i = 0; i < c1.size(); ++i) ASSERT_NEAR(c1[i], c2[i], 1e-4f) << i;
}

TEST(Gemm, BetaZeroIgnoresNanAndKZeroScales) {
  const int M = 5, N = 6, K = 4;
  const auto A = random_vec(M * K, 1), B = random_vec(K * N, 2);
  std::vector<double> C(M * N, std::numeric_limits<double>::quiet_NaN());
  gemm_blocked<double>(false, false, M, N, K, 1.0, A.data(), K, B.data(), N, 0.0, C.data(), N);
  for (double c : C) EXPECT_TRUE(std::isfinite(c));
  std::vector<double> D(M * N, 2.0);
  gemm<double>(false, false, M, N, 0, 1.0, A.data(), 1, B.data(), 1, 0.5, D.data(), N);
  for (double d : D) EXPECT_EQ(d, 1.0);
}

// Runs the scope with one fp32 GEMM provider, restoring the chosen one after.
class ScopedGemmProvider {
 public:
  explicit ScopedGemmProvider(const std::string& name) : ok_(use_gemm_provider(name)) {}
  ~ScopedGemmProvider() { use_gemm_provider(gemm_provider().name); }
  bool ok() const { return ok_; }

 private:
  bool ok_;
};

// Every provider linked into this build (not only the one this CPU chose) computes the
// contract: all transposes, odd shapes, padded leading dimensions, alpha and beta.
TEST(Gemm, EveryLinkedProviderMatchesNaive) {
  for (const std::string& p : linked_gemm_providers()) {
    SCOPED_TRACE(p);
    ScopedGemmProvider use(p);
    ASSERT_TRUE(use.ok());
    for (const auto& g : kCases) check_gemm<float>(g, gemm<float>, 2e-6);
  }
}

// beta = 0 must not read C (NaN there stays out of the result), and a provider gives the same
// bits for the same inputs (the engine's bit-exact resume and streaming == resident need it).
TEST(Gemm, EveryLinkedProviderIgnoresNanAtBetaZeroAndIsDeterministic) {
  const int M = 130, N = 67, K = 300;
  const auto A = random_vec<float>(size_t(M) * K, 4), B = random_vec<float>(size_t(N) * K, 5);
  for (const std::string& p : linked_gemm_providers()) {
    SCOPED_TRACE(p);
    ScopedGemmProvider use(p);
    ASSERT_TRUE(use.ok());
    std::vector<float> c1(size_t(M) * N, std::numeric_limits<float>::quiet_NaN()), c2 = c1;
    gemm<float>(false, true, M, N, K, 1.f, A.data(), K, B.data(), K, 0.f, c1.data(), N);
    gemm<float>(false, true, M, N, K, 1.f, A.data(), K, B.data(), K, 0.f, c2.data(), N);
    for (size_t i = 0; i < c1.size(); ++i) {
      ASSERT_TRUE(std::isfinite(c1[i])) << i;
      ASSERT_EQ(std::bit_cast<uint32_t>(c1[i]), std::bit_cast<uint32_t>(c2[i])) << i;
    }
  }
}

TEST(Gemm, UnknownProviderIsRefused) {
  EXPECT_FALSE(use_gemm_provider("mkl"));
  EXPECT_FALSE(use_gemm_provider(""));
}

TEST(Matmul, ForwardWithBiasMatchesNaive) {
  const int N = 9, C = 13, OC = 70;
  const auto inp = random_vec<float>(N * C, 1), w = random_vec<float>(OC * C, 2);
  const auto bias = random_vec<float>(OC, 3);
  std::vector<float> out(N * OC, 123.f);
  matmul_forward(out.data(), inp.data(), w.data(), bias.data(), N, C, OC);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double s = bias[o];
      for (int c = 0; c < C; ++c) s += double(inp[n * C + c]) * w[o * C + c];
      EXPECT_NEAR(out[n * OC + o], s, 1e-5);
    }
}

}  // namespace
}  // namespace mt::cpu

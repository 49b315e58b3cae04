// Attention: finite-difference gradient checks (double), a naive O(T^2) reference for the
// forward (float and double), and bit-for-bit determinism of forward and backward.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/attention.h"
#include "tests/kernels/test_util.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace mt::cpu {
namespace {

using test::random_vec;

struct Shape {
  int B, T, H, KVH, D;
  size_t qkv() const { return size_t(B) * T * (H + 2 * KVH) * D; }
  size_t out() const { return size_t(B) * T * H * D; }
  size_t lse() const { return size_t(B) * H * T; }
};

// Naive causal GQA attention in double (materialises one row of scores at a time).
void reference(const Shape& s, const std::vector<double>& qkv, std::vector<double>& out,
               std::vector<double>& lse) {
  const long row = long(s.H + 2 * s.KVH) * s.D;
  const double scale = 1.0 / std::sqrt(double(s.D));
  out.assign(s.out(), 0.0);
  lse.assign(s.lse(), 0.0);
  std::vector<double> sc(s.T);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.H; ++h) {
      const int g = h / (s.H / s.KVH);
      for (int i = 0; i < s.T; ++i) {
        const double* q = &qkv[(long(b) * s.T + i) * row + long(h) * s.D];
        double mx = -1e300;
        for (int j = 0; j <= i; ++j) {
          const double* k = &qkv[(long(b) * s.T + j) * row + long(s.H + g) * s.D];
          double d = 0;
          for (int c = 0; c < s.D; ++c) d += q[c] * k[c];
          sc[j] = d * scale;
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (int j = 0; j <= i; ++j) sum += std::exp(sc[j] - mx);
        double* o = &out[(long(b) * s.T + i) * s.H * s.D + long(h) * s.D];
        for (int j = 0; j <= i; ++j) {
          const double p = std::exp(sc[j] - mx) / sum;
          const double* v = &qkv[(long(b) * s.T + j) * row + long(s.H + s.KVH + g) * s.D];
          for (int c = 0; c < s.D; ++c) o[c] += p * v[c];
        }
        lse[(long(b) * s.H + h) * s.T + i] = mx + std::log(sum);
      }
    }
}

void grad_check(const Shape& s, size_t max_checks) {
  std::vector<double> qkv = random_vec(s.qkv(), 100 + s.T, -1.5, 1.5);
  const std::vector<double> R = random_vec(s.out(), 200 + s.T);
  std::vector<double> out(s.out()), lse(s.lse());
  auto f = [&] {
    attention_forward(out.data(), lse.data(), qkv.data(), nullptr, s.B, s.T, s.H, s.KVH, s.D);
    return test::dot(out, R);
  };
  f();
  std::vector<double> dqkv(s.qkv(), 1e30);  // overwritten
  attention_backward(dqkv.data(), R.data(), qkv.data(), out.data(), lse.data(), nullptr, s.B, s.T, s.H,
                     s.KVH, s.D);
  test::expect_grad_matches(qkv, dqkv, f, "dqkv", max_checks);
}

TEST(GradCheckAttention, GqaOddLength) { grad_check({2, 7, 4, 2, 8}, 100000); }
TEST(GradCheckAttention, SingleToken) { grad_check({2, 1, 2, 1, 4}, 100000); }
TEST(GradCheckAttention, MhaPastOneTile) { grad_check({2, 67, 2, 2, 8}, 1500); }
TEST(GradCheckAttention, MqaThreeTilesOddHeadDim) { grad_check({1, 130, 2, 1, 6}, 600); }

template <typename T>
void check_against_reference(const Shape& s, double tol) {
  const std::vector<double> qkv = random_vec(s.qkv(), 7 + s.T, -2.0, 2.0);
  std::vector<double> ref_out, ref_lse;
  reference(s, qkv, ref_out, ref_lse);
  const std::vector<T> qkv_t(qkv.begin(), qkv.end());
  std::vector<T> out(s.out()), lse(s.lse());
  attention_forward(out.data(), lse.data(), qkv_t.data(), nullptr, s.B, s.T, s.H, s.KVH, s.D);
  double max_err = 0, max_lse_err = 0;
  for (size_t i = 0; i < out.size(); ++i)
    max_err = std::max(max_err, std::abs(double(out[i]) - ref_out[i]));
  for (size_t i = 0; i < lse.size(); ++i)
    max_lse_err = std::max(max_lse_err, std::abs(double(lse[i]) - ref_lse[i]));
  EXPECT_LT(max_err, tol);
  EXPECT_LT(max_lse_err, tol * 10);
}

TEST(AttentionReference, DoubleMatchesNaive) {
  for (Shape s : {Shape{2, 1, 2, 1, 4}, Shape{2, 67, 4, 2, 8}, Shape{1, 200, 4, 4, 24}})
    check_against_reference<double>(s, 1e-12);
}

TEST(AttentionReference, FloatMatchesNaive) {
  for (Shape s : {Shape{2, 1, 2, 1, 4}, Shape{2, 67, 4, 2, 8}, Shape{1, 200, 8, 2, 64},
                  Shape{1, 129, 2, 1, 40}})
    check_against_reference<float>(s, 2e-5);
}

// Runs forward + backward in float with the given number of threads.
void run_float(const Shape& s, int threads, std::vector<float>& out, std::vector<float>& lse,
               std::vector<float>& dqkv) {
#ifdef _OPENMP
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
#else
  (void)threads;
#endif
  const std::vector<float> qkv = random_vec<float>(s.qkv(), 5);
  const std::vector<float> dout = random_vec<float>(s.out(), 6);
  out.assign(s.out(), 0.f);
  lse.assign(s.lse(), 0.f);
  dqkv.assign(s.qkv(), 0.f);
  attention_forward(out.data(), lse.data(), qkv.data(), nullptr, s.B, s.T, s.H, s.KVH, s.D);
  attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), nullptr, s.B, s.T, s.H,
                     s.KVH, s.D);
#ifdef _OPENMP
  omp_set_num_threads(saved);
#endif
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(AttentionDeterminism, BitIdenticalAcrossRunsAndThreadCounts) {
  const Shape s{2, 150, 4, 2, 32};
  std::vector<float> o1, l1, d1, o2, l2, d2, o3, l3, d3;
  run_float(s, 2, o1, l1, d1);
  run_float(s, 2, o2, l2, d2);
  run_float(s, 1, o3, l3, d3);
  EXPECT_TRUE(same_bits(o1, o2) && same_bits(l1, l2) && same_bits(d1, d2));
  EXPECT_TRUE(same_bits(o1, o3) && same_bits(l1, l3) && same_bits(d1, d3));
  double norm = 0;
  for (float x : d1) norm += double(x) * x;
  EXPECT_GT(norm, 0.0);
}

}  // namespace
}  // namespace mt::cpu

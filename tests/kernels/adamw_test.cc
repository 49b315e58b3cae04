// AdamW against a scalar reference over several steps (float and bf16 storage, with and
// without the bf16 shadow), and the double-precision sum of squares.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/adamw.h"
#include "tests/kernels/test_util.h"

namespace mt::cpu {
namespace {

// One AdamW step for one element, written straight from the formula in adamw.h in float
// (moments rounded to the storage type S after the update), one element at a time.
template <typename S>
void reference_step(float& p, S g_s, S& m_s, S& v_s, const AdamWParams& ap) {
  const float g = to_float(g_s) * ap.grad_scale;
  const float m = ap.beta1 * to_float(m_s) + (1.0f - ap.beta1) * g;
  const float v = ap.beta2 * to_float(v_s) + (1.0f - ap.beta2) * g * g;
  m_s = from_float<S>(m);
  v_s = from_float<S>(v);
  const float bc1 = float(1.0 - std::pow(double(ap.beta1), double(ap.step)));
  const float bc2 = float(1.0 - std::pow(double(ap.beta2), double(ap.step)));
  p -= ap.lr * (m / bc1 / (std::sqrt(v / bc2) + ap.eps) + ap.weight_decay * p);
}

template <typename S>
void check_adamw(bool with_shadow, double moment_tol) {
  const size_t n = 1037;
  std::vector<float> p = test::random_vec<float>(n, 1), p_ref = p;
  std::vector<S> m(n), v(n), m_ref(n), v_ref(n), g(n);
  std::vector<bf16> shadow(n);
  AdamWParams ap;
  ap.lr = 1e-2f;
  ap.weight_decay = 0.1f;
  ap.grad_scale = 0.5f;
  for (long step = 1; step <= 5; ++step) {
    ap.step = step;
    const auto gf = test::random_vec<float>(n, uint32_t(10 + step), -2.0, 2.0);
    for (size_t i = 0; i < n; ++i) g[i] = from_float<S>(gf[i]);
    adamw_update<S>(p.data(), g.data(), m.data(), v.data(), with_shadow ? shadow.data() : nullptr,
                    n, ap);
    for (size_t i = 0; i < n; ++i) reference_step<S>(p_ref[i], g[i], m_ref[i], v_ref[i], ap);
  }
  for (size_t i = 0; i < n; ++i) {
    ASSERT_NEAR(p[i], p_ref[i], 2e-6 * (1 + std::abs(p_ref[i]))) << i;
    const double mr = to_float(m_ref[i]), vr = to_float(v_ref[i]);
    ASSERT_NEAR(to_float(m[i]), mr, moment_tol * (std::abs(mr) + 1e-6)) << i;
    ASSERT_NEAR(to_float(v[i]), vr, moment_tol * (std::abs(vr) + 1e-6)) << i;
    if (with_shadow) {
      ASSERT_EQ(shadow[i].bits, float_to_bf16(p[i]).bits) << i;
    }
  }
  EXPECT_NE(p[0], test::random_vec<float>(n, 1)[0]) << "parameters must move";
}

TEST(AdamW, FloatStorageMatchesReference) { check_adamw<float>(false, 1e-5); }
TEST(AdamW, FloatStorageWithShadow) { check_adamw<float>(true, 1e-5); }
TEST(AdamW, Bf16StorageMatchesReference) { check_adamw<bf16>(true, 1.6e-2); }

TEST(AdamW, SumSquares) {
  const size_t n = 1003;  // not a multiple of the lane count
  const auto x = test::random_vec<float>(n, 3, -3.0, 3.0);
  std::vector<bf16> xb(n);
  long double want = 0, want_b = 0;
  for (size_t i = 0; i < n; ++i) {
    want += (long double)x[i] * x[i];
    xb[i] = float_to_bf16(x[i]);
    const float b = bf16_to_float(xb[i]);
    want_b += (long double)b * b;
  }
  EXPECT_NEAR(sum_squares<float>(x.data(), n), double(want), 1e-12 * double(want));
  EXPECT_NEAR(sum_squares<bf16>(xb.data(), n), double(want_b), 1e-12 * double(want_b));
  EXPECT_EQ(sum_squares<float>(x.data(), 0), 0.0);
  EXPECT_EQ(sum_squares<float>(x.data(), 5), double(x[0]) * x[0] + double(x[1]) * x[1] +
                                                  double(x[2]) * x[2] + double(x[3]) * x[3] +
                                                  double(x[4]) * x[4]);
}

}  // namespace
}  // namespace mt::cpu

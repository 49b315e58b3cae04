// The float instantiations (which use the vectorised exp) against the double ones, and the
// accuracy of that exp itself.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cpu/common.h"
#include "kernels/lm_head_loss.h"
#include "kernels/swiglu.h"
#include "tests/kernels/test_util.h"

namespace mt::cpu {
namespace {

template <typename T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// max |a - b| / (max |b| + tiny)
template <typename A>
double rel_err(const std::vector<A>& a, const std::vector<double>& b) {
  double err = 0, scale = 1e-30;
  for (size_t i = 0; i < b.size(); ++i) {
    err = std::max(err, std::abs(double(a[i]) - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return err / scale;
}

TEST(FastExp, AccurateAndExactAtTheEnds) {
  double worst = 0;
  for (double x = -87.0; x <= 88.0; x += 0.001) {
    const float xf = float(x);
    const double want = std::exp(double(xf));
    worst = std::max(worst, std::abs(double(detail::fast_exp(xf)) - want) / want);
  }
  EXPECT_LT(worst, 4e-7);
  EXPECT_EQ(detail::fast_exp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(detail::fast_exp(-100.0f), 0.0f);
  EXPECT_EQ(detail::fast_exp(0.0f), 1.0f);
}

TEST(FloatVsDouble, Swiglu) {
  const int N = 7, F = 300;
  const auto gu = test::random_vec(N * 2 * F, 1, -8.0, 8.0), dy = test::random_vec(N * F, 2);
  std::vector<double> out(N * F), dgu(gu.size());
  swiglu_forward(out.data(), gu.data(), N, F);
  swiglu_backward(dgu.data(), dy.data(), gu.data(), N, F);
  const auto guf = cast<float>(gu), dyf = cast<float>(dy);
  std::vector<float> outf(N * F), dguf(gu.size());
  swiglu_forward(outf.data(), guf.data(), N, F);
  swiglu_backward(dguf.data(), dyf.data(), guf.data(), N, F);
  EXPECT_LT(rel_err(outf, out), 1e-6);
  EXPECT_LT(rel_err(dguf, dgu), 1e-6);
}

TEST(FloatVsDouble, LmHeadLoss) {
  const int N = 37, C = 24, V = 301, chunk = 16;
  std::vector<int32_t> targets(N);
  for (int i = 0; i < N; ++i) targets[i] = i % 5 == 4 ? -1 : (i * 37) % V;
  const auto x = test::random_vec(N * C, 3), W = test::random_vec(V * C, 4);
  std::vector<double> dx(N * C), dW(V * C, 0.0), scratch(chunk * V);
  const auto r = lm_head_loss<double>(dx.data(), dW.data(), nullptr, x.data(), W.data(),
                                      targets.data(), N, C, V, chunk, 0.01, scratch.data());
  const auto xf = cast<float>(x), Wf = cast<float>(W);
  std::vector<float> dxf(N * C), dWf(V * C, 0.f), scratchf(chunk * V);
  const auto rf = lm_head_loss<float>(dxf.data(), dWf.data(), nullptr, xf.data(), Wf.data(),
                                      targets.data(), N, C, V, chunk, 0.01f, scratchf.data());
  EXPECT_EQ(rf.counted, r.counted);
  EXPECT_NEAR(rf.loss_sum, r.loss_sum, 1e-5 * r.loss_sum);
  EXPECT_LT(rel_err(dxf, dx), 1e-5);
  EXPECT_LT(rel_err(dWf, dW), 1e-5);
}

TEST(FloatVsDouble, AttentionBackward) {
  const int B = 2, T = 97, H = 4, KVH = 2, D = 16;
  const size_t nq = size_t(B) * T * (H + 2 * KVH) * D, no = size_t(B) * T * H * D;
  const auto qkv = test::random_vec(nq, 5, -2.0, 2.0), dout = test::random_vec(no, 6);
  std::vector<double> out(no), lse(B * H * T), dqkv(nq);
  attention_forward(out.data(), lse.data(), qkv.data(), nullptr, B, T, H, KVH, D);
  attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), nullptr, B, T, H, KVH,
                     D);
  const auto qkvf = cast<float>(qkv), doutf = cast<float>(dout);
  std::vector<float> outf(no), lsef(B * H * T), dqkvf(nq);
  attention_forward(outf.data(), lsef.data(), qkvf.data(), nullptr, B, T, H, KVH, D);
  attention_backward(dqkvf.data(), doutf.data(), qkvf.data(), outf.data(), lsef.data(), nullptr, B, T, H,
                     KVH, D);
  EXPECT_LT(rel_err(outf, out), 1e-5);
  EXPECT_LT(rel_err(dqkvf, dqkv), 1e-5);
}

}  // namespace
}  // namespace mt::cpu

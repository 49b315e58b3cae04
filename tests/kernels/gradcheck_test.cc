// Finite-difference gradient checks in double for the dense, norm, rope, swiglu, embedding
// and fused LM-head kernels. Objective L = sum(out * R) with a random R. Accumulating
// backwards start from random contents (subtracted afterwards); overwriting ones from garbage.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/embedding.h"
#include "kernels/lm_head_loss.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "tests/kernels/test_util.h"

namespace mt::cpu {
namespace {

using test::dot;
using test::expect_grad_matches;
using test::random_vec;
using Vec = std::vector<double>;

// Runs an accumulating backward into buffers pre-filled with random values, returns the
// increments (so "+=" semantics are checked along with the values).
Vec increment(const Vec& before, const Vec& after) {
  Vec d(before.size());
  for (size_t i = 0; i < d.size(); ++i) d[i] = after[i] - before[i];
  return d;
}

void check_matmul(bool with_bias) {
  const int N = 5, C = 7, OC = 6;
  Vec inp = random_vec(N * C, 1), w = random_vec(OC * C, 2), bias = random_vec(OC, 3);
  const Vec R = random_vec(N * OC, 4);
  auto f = [&] {
    Vec out(N * OC);
    matmul_forward(out.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, N, C, OC);
    return dot(out, R);
  };
  const Vec dinp0 = random_vec(N * C, 5), dw0 = random_vec(OC * C, 6), db0 = random_vec(OC, 7);
  Vec dinp = dinp0, dw = dw0, db = db0;
  matmul_backward(dinp.data(), dw.data(), with_bias ? db.data() : nullptr, R.data(), inp.data(),
                  w.data(), N, C, OC);
  expect_grad_matches(inp, increment(dinp0, dinp), f, "dinp");
  expect_grad_matches(w, increment(dw0, dw), f, "dweight");
  if (with_bias) {
    expect_grad_matches(bias, increment(db0, db), f, "dbias");
  } else {
    EXPECT_EQ(db, db0) << "dbias must be untouched when nullptr is passed";
  }
}

TEST(GradCheckMatmul, WithBias) { check_matmul(true); }
TEST(GradCheckMatmul, WithoutBias) { check_matmul(false); }

TEST(GradCheckRmsnorm, Basic) {
  const int N = 4, C = 9;
  const float eps = 1e-5f;
  Vec inp = random_vec(N * C, 11), w = random_vec(C, 12, 0.5, 1.5);
  const Vec R = random_vec(N * C, 13);
  auto f = [&] {
    Vec out(N * C), rstd(N);
    rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C, eps);
    return dot(out, R);
  };
  Vec out(N * C), rstd(N);
  rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C, eps);
  for (int n = 0; n < N; ++n) {
    double ss = 0;
    for (int c = 0; c < C; ++c) ss += inp[n * C + c] * inp[n * C + c];
    EXPECT_NEAR(rstd[n], 1.0 / std::sqrt(ss / C + eps), 1e-12);
  }
  const Vec dinp0 = random_vec(N * C, 14), dw0 = random_vec(C, 15);
  Vec dinp = dinp0, dw = dw0;
  rmsnorm_backward(dinp.data(), dw.data(), R.data(), inp.data(), w.data(), rstd.data(), N, C);
  expect_grad_matches(inp, increment(dinp0, dinp), f, "dinp");
  expect_grad_matches(w, increment(dw0, dw), f, "dweight");
}

TEST(GradCheckRope, GqaTwoSequences) {
  const int B = 2, T = 5, H = 4, KVH = 2, D = 8;
  std::vector<float> inv_freq(D / 2);
  for (int i = 0; i < D / 2; ++i) inv_freq[i] = float(std::pow(10000.0, -2.0 * i / D));
  const size_t n = size_t(B) * T * (H + 2 * KVH) * D;
  Vec qkv = random_vec(n, 21);
  const Vec R = random_vec(n, 22);
  auto f = [&] {
    Vec y = qkv;
    rope_forward(y.data(), inv_freq.data(), nullptr, B, T, H, KVH, D, 1.f);
    return dot(y, R);
  };
  Vec grad = R;
  rope_backward(grad.data(), inv_freq.data(), nullptr, B, T, H, KVH, D, 1.f);
  expect_grad_matches(qkv, grad, f, "dqkv");
  // Position 0 is not rotated and v is untouched.
  Vec y = qkv;
  rope_forward(y.data(), inv_freq.data(), nullptr, B, T, H, KVH, D, 1.f);
  for (int c = 0; c < (H + 2 * KVH) * D; ++c) EXPECT_EQ(y[c], qkv[c]);
  const size_t v0 = size_t(3) * (H + 2 * KVH) * D + size_t(H + KVH) * D;
  for (int c = 0; c < KVH * D; ++c) EXPECT_EQ(y[v0 + c], qkv[v0 + c]);
}

TEST(GradCheckSwiglu, Basic) {
  const int N = 3, F = 7;
  Vec gu = random_vec(N * 2 * F, 31, -3.0, 3.0);
  const Vec R = random_vec(N * F, 32);
  auto f = [&] {
    Vec out(N * F);
    swiglu_forward(out.data(), gu.data(), N, F);
    return dot(out, R);
  };
  Vec dgu(gu.size(), 1e30);  // overwritten
  swiglu_backward(dgu.data(), R.data(), gu.data(), N, F);
  expect_grad_matches(gu, dgu, f, "dgu");
}

TEST(GradCheckEmbedding, RepeatedTokens) {
  const int V = 5, C = 6, N = 8;
  const std::vector<int32_t> tokens = {3, 1, 3, 0, 4, 3, 1, 2};
  Vec wte = random_vec(V * C, 41);
  const Vec R = random_vec(N * C, 42);
  auto f = [&] {
    Vec out(N * C);
    embedding_forward(out.data(), tokens.data(), wte.data(), N, C);
    return dot(out, R);
  };
  const Vec d0 = random_vec(V * C, 43);
  Vec d = d0;
  embedding_backward(d.data(), R.data(), tokens.data(), N, C);
  expect_grad_matches(wte, increment(d0, d), f, "dwte");
}

void check_lm_head(int chunk) {
  const int N = 11, C = 6, V = 13;
  const double gs = 0.7;
  const std::vector<int32_t> targets = {2, -1, 12, 0, 5, -1, 7, 7, 1, -1, 3};
  Vec x = random_vec(N * C, 51), W = random_vec(V * C, 52);
  Vec scratch(size_t(chunk) * V);
  auto f = [&] {
    auto r = lm_head_loss<double>(nullptr, nullptr, nullptr, x.data(), W.data(), targets.data(),
                                  N, C, V, chunk, gs, scratch.data());
    return gs * r.loss_sum;
  };
  Vec dx(N * C, 1e30), losses(N, -1.0);
  const Vec dW0 = random_vec(V * C, 53);
  Vec dW = dW0;
  auto r = lm_head_loss<double>(dx.data(), dW.data(), losses.data(), x.data(), W.data(),
                                targets.data(), N, C, V, chunk, gs, scratch.data());
  EXPECT_EQ(r.counted, 8);
  double sum = 0;
  for (int i = 0; i < N; ++i) {
    if (targets[i] < 0) {
      EXPECT_EQ(losses[i], 0.0);
    } else {
      EXPECT_GT(losses[i], 0.0);
    }
    sum += losses[i];
  }
  EXPECT_NEAR(sum, r.loss_sum, 1e-12);
  EXPECT_NEAR(f(), gs * r.loss_sum, 1e-12) << "forward-only and fused passes must agree";
  expect_grad_matches(x, dx, f, "dx");
  expect_grad_matches(W, increment(dW0, dW), f, "dW");
}

TEST(GradCheckLmHeadLoss, ChunkNotDividingN) { check_lm_head(4); }
TEST(GradCheckLmHeadLoss, ChunkOfThree) { check_lm_head(3); }
TEST(GradCheckLmHeadLoss, ChunkLargerThanN) { check_lm_head(32); }

}  // namespace
}  // namespace mt::cpu

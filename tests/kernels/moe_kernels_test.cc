// The mixture-of-experts kernels on the CPU reference against finite differences in double and
// against their definitions: the routers (both kinds, renormalised or not, with the load-balancing
// gradient), the permutation, the weighted scatter's backward, the sigmoid gate, gpt-oss's clamped
// SwiGLU and attention sinks (against a naive softmax with the sink as an extra logit).
// Objective L = sum(out * R) with a random R, as gradcheck_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention.h"
#include "kernels/moe.h"
#include "kernels/swiglu.h"
#include "tests/kernels/test_util.h"

namespace mt::cpu {
namespace {

using test::dot;
using test::expect_grad_matches;
using test::random_vec;
using Vec = std::vector<double>;

// Logits whose top k are well apart (no near ties: a difference quotient must not flip a choice).
Vec spread_logits(int N, int E, uint32_t seed) {
  Vec l = random_vec(size_t(N) * E, seed, -0.3, 0.3);
  for (int t = 0; t < N; ++t)
    for (int e = 0; e < E; ++e) l[size_t(t) * E + e] += 0.7 * ((e * 5 + t * 3) % E);
  return l;
}

struct RouterCase {
  RouterKind kind;
  bool renormalize, aux;
};

class RouterGradCheck : public ::testing::TestWithParam<RouterCase> {};

// L = sum(w * Rw) + sum over tokens and experts of softmax(logits) * counts * aux_scale: the
// routers' combine weights and the load-balancing loss's smooth part (counts held fixed).
TEST_P(RouterGradCheck, MatchesFiniteDifferences) {
  const RouterCase c = GetParam();
  const RouterShape s{11, 7, 3, c.kind, c.renormalize};
  Vec logits = spread_logits(s.N, s.E, 3);
  const Vec Rw = random_vec(size_t(s.N) * s.k, 4);
  const Vec counts = random_vec(size_t(s.E), 5, 0.0, 9.0);
  const double aux_scale = c.aux ? 0.37 : 0.0;
  std::vector<int32_t> idx(size_t(s.N) * s.k), idx0;
  auto f = [&] {
    Vec w(size_t(s.N) * s.k), stats(2 * size_t(s.E), 0.0);
    moe_route_forward(idx.data(), w.data(), stats.data(), logits.data(), s);
    double aux = 0;
    for (int e = 0; e < s.E; ++e) aux += stats[size_t(s.E + e)] * counts[size_t(e)];  // probability sums
    return dot(w, Rw) + aux_scale * aux;
  };
  f();
  idx0 = idx;
  Vec w(size_t(s.N) * s.k), dlogits(size_t(s.N) * s.E, 1e30);
  moe_route_forward<double, double>(idx.data(), w.data(), nullptr, logits.data(), s);
  // best first, distinct; the weights sum to 1 where the kind normalises them
  for (int t = 0; t < s.N; ++t) {
    double sum = 0;
    for (int j = 0; j < s.k; ++j) sum += w[size_t(t * s.k + j)];
    if (c.kind == RouterKind::kTopKSoftmax || c.renormalize) {
      EXPECT_NEAR(sum, 1.0, 1e-12);
    }
    for (int j = 1; j < s.k; ++j) EXPECT_GE(w[size_t(t * s.k + j - 1)], w[size_t(t * s.k + j)]);
  }
  moe_route_backward(dlogits.data(), Rw.data(), logits.data(), idx.data(), w.data(), c.aux ? counts.data() : nullptr,
                     aux_scale, s);
  expect_grad_matches(logits, dlogits, [&] {
    const double v = f();
    EXPECT_EQ(idx, idx0) << "a difference quotient flipped a choice";
    return v;
  }, "dlogits");
}

INSTANTIATE_TEST_SUITE_P(Kinds, RouterGradCheck,
                         ::testing::Values(RouterCase{RouterKind::kSoftmaxTopK, false, false},
                                           RouterCase{RouterKind::kSoftmaxTopK, true, false},
                                           RouterCase{RouterKind::kSoftmaxTopK, true, true},
                                           RouterCase{RouterKind::kTopKSoftmax, false, true}));

TEST(MoeKernels, RouterStatsCountSlotsAndSumTheFullSoftmax) {
  const RouterShape s{5, 4, 2, RouterKind::kTopKSoftmax, false};
  const Vec logits = spread_logits(s.N, s.E, 9);
  std::vector<int32_t> idx(size_t(s.N) * s.k);
  Vec w(idx.size()), stats(2 * size_t(s.E), 1.0);  // += : starts at 1
  moe_route_forward(idx.data(), w.data(), stats.data(), logits.data(), s);
  Vec counts(size_t(s.E), 1.0), probs(size_t(s.E), 1.0);
  for (int32_t e : idx) counts[size_t(e)] += 1;
  for (int t = 0; t < s.N; ++t) {
    double m = -1e300, z = 0;
    for (int e = 0; e < s.E; ++e) m = std::max(m, logits[size_t(t * s.E + e)]);
    for (int e = 0; e < s.E; ++e) z += std::exp(logits[size_t(t * s.E + e)] - m);
    for (int e = 0; e < s.E; ++e) probs[size_t(e)] += std::exp(logits[size_t(t * s.E + e)] - m) / z;
  }
  for (int e = 0; e < s.E; ++e) {
    EXPECT_EQ(stats[size_t(e)], counts[size_t(e)]);
    EXPECT_NEAR(stats[size_t(s.E + e)], probs[size_t(e)], 1e-12);
  }
}

TEST(MoeKernels, SortGroupsSlotsByExpertStably) {
  const int N = 9, E = 5, k = 2;
  std::vector<int32_t> idx = {3, 0, 1, 3, 4, 2, 0, 3, 1, 4, 3, 2, 0, 1, 4, 0, 2, 3};
  std::vector<int32_t> rows(size_t(N) * k, -1), offsets(size_t(E) + 1, -1);
  moe_sort(rows.data(), offsets.data(), idx.data(), N, E, k);
  EXPECT_EQ(offsets.front(), 0);
  EXPECT_EQ(offsets.back(), N * k);
  for (int e = 0; e < E; ++e)
    for (int i = offsets[size_t(e)]; i < offsets[size_t(e) + 1]; ++i) {
      EXPECT_EQ(idx[size_t(rows[size_t(i)])], e);
      if (i > offsets[size_t(e)]) {
        EXPECT_LT(rows[size_t(i) - 1], rows[size_t(i)]);
      }
    }
}

// out[t] += w (h W^T + b), an expert's down projection weighted onto its tokens, and its backward
// through h, b and w as an expert's backward takes it: dout gathered, dh = dout W, then
// moe_weight_backward. Also the gather is an exact copy.
TEST(MoeKernels, WeightBackwardBehindTheDownProjectionMatchesFiniteDifferences) {
  const int N = 6, C = 5, F = 4, k = 2, n = 4;
  const std::vector<int32_t> rows = {1, 4, 7, 10};  // slots t * k + j: tokens 0, 2, 3, 5
  Vec h = random_vec(size_t(n) * F, 21), w = random_vec(size_t(N) * k, 22), base = random_vec(size_t(N) * C, 23);
  Vec W = random_vec(size_t(C) * F, 25), b = random_vec(size_t(C), 26);
  const Vec R = random_vec(size_t(N) * C, 24);
  for (const bool with_bias : {true, false}) {
    auto y_of = [&] {  // y = h W^T + b
      Vec y(size_t(n) * C);
      for (int i = 0; i < n; ++i)
        for (int c = 0; c < C; ++c) {
          double acc = with_bias ? b[size_t(c)] : 0;
          for (int f = 0; f < F; ++f) acc += h[size_t(i * F + f)] * W[size_t(c * F + f)];
          y[size_t(i * C + c)] = acc;
        }
      return y;
    };
    auto f = [&] {
      Vec out = base, y = y_of();
      moe_scatter(out.data(), y.data(), rows.data(), w.data(), n, C, k);
      return dot(out, R);
    };
    Vec dy(size_t(n) * C, 1e30), dh(size_t(n) * F, 0.0), dw(w.size(), 0.0);
    moe_gather(dy.data(), R.data(), rows.data(), n, C, k);
    for (int i = 0; i < n; ++i)
      for (int c = 0; c < C; ++c) EXPECT_EQ(dy[size_t(i * C + c)], R[size_t(rows[size_t(i)] / k * C + c)]);
    for (int i = 0; i < n; ++i)  // dh = dy W
      for (int c = 0; c < C; ++c)
        for (int q = 0; q < F; ++q) dh[size_t(i * F + q)] += dy[size_t(i * C + c)] * W[size_t(c * F + q)];
    moe_weight_backward(dw.data(), dh.data(), dy.data(), h.data(), with_bias ? b.data() : nullptr, rows.data(),
                        w.data(), n, F, C);
    expect_grad_matches(w, dw, f, with_bias ? "dw, with a bias" : "dw");
    expect_grad_matches(h, dh, f, "dh");
    if (with_bias) {  // db = the sum of the weighted dy rows
      Vec db(size_t(C), 0.0);
      for (int i = 0; i < n; ++i)
        for (int c = 0; c < C; ++c) db[size_t(c)] += dy[size_t(i * C + c)];
      expect_grad_matches(b, db, f, "db from the weighted dy");
    }
  }
}

TEST(MoeKernels, SigmoidGateMatchesFiniteDifferences) {
  const int N = 4, C = 6;
  Vec y = random_vec(size_t(N) * C, 31), g = random_vec(size_t(N), 32, -2, 2);
  const Vec base = random_vec(size_t(N) * C, 33), R = random_vec(size_t(N) * C, 34);
  auto f = [&] {
    Vec out = base;
    sigmoid_gate_forward(out.data(), y.data(), g.data(), N, C);
    return dot(out, R);
  };
  Vec dy(y.size(), 1e30), dg(g.size(), 1e30);
  sigmoid_gate_backward(dy.data(), dg.data(), R.data(), y.data(), g.data(), N, C);
  expect_grad_matches(y, dy, f, "dy");
  expect_grad_matches(g, dg, f, "dg");
}

// gpt-oss: (clamp(up) + 1) * g * sigmoid(alpha g), g = min(gate, limit); values on both sides of
// the limits (a clamped one has no gradient), none within the difference quotient's reach of one.
TEST(MoeKernels, ClampedSwigluMatchesItsDefinitionAndFiniteDifferences) {
  const int N = 4, F = 9;
  const Activation act(GateActivation::kClampedSwiglu, 1.702f, 1.25f);
  Vec gu = random_vec(size_t(N) * 2 * F, 41, -3.0, 3.0);
  for (double& x : gu)
    if (std::abs(std::abs(x) - 1.25) < 1e-3) x += 0.01;
  const Vec R = random_vec(size_t(N) * F, 42);
  auto f = [&] {
    Vec out(size_t(N) * F);
    swiglu_forward(out.data(), gu.data(), N, F, act);
    return dot(out, R);
  };
  Vec out(size_t(N) * F);
  swiglu_forward(out.data(), gu.data(), N, F, act);
  for (int i = 0; i < N * F; ++i) {
    const int n = i / F, j = i % F;
    const double g = std::min(gu[size_t(n * 2 * F + j)], 1.25), u = std::clamp(gu[size_t(n * 2 * F + F + j)], -1.25, 1.25);
    EXPECT_NEAR(out[size_t(i)], (u + 1) * g / (1 + std::exp(-double(1.702f) * g)), 1e-12);  // alpha as stored
  }
  Vec dgu(gu.size(), 1e30);
  swiglu_backward(dgu.data(), R.data(), gu.data(), N, F, act);
  expect_grad_matches(gu, dgu, f, "dgu");
}

// Attention with a per-head sink: softmax over the scores and the sink, the sink adding no value.
TEST(MoeKernels, AttentionSinksMatchANaiveSoftmaxAndFiniteDifferences) {
  const int B = 2, T = 7, H = 4, KVH = 2, D = 6;
  const size_t row = size_t(H + 2 * KVH) * D;
  Vec qkv = random_vec(size_t(B) * T * row, 51, -1.2, 1.2), sinks = random_vec(size_t(H), 52, -1, 2);
  const Vec R = random_vec(size_t(B) * T * H * D, 53);
  auto forward = [&](Vec& out, Vec& lse) {
    out.assign(size_t(B) * T * H * D, 0);
    lse.assign(size_t(B) * H * T, 0);
    attention_forward(out.data(), lse.data(), qkv.data(), nullptr, B, T, H, KVH, D);
    attention_sinks_forward(out.data(), lse.data(), sinks.data(), B, T, H, D);
  };
  Vec out, lse;
  forward(out, lse);
  for (int b = 0; b < B; ++b)  // the naive form
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < T; ++t) {
        const int g = h / (H / KVH);
        std::vector<double> s;
        for (int j = 0; j <= t; ++j) {
          double d = 0;
          for (int c = 0; c < D; ++c) d += qkv[(b * T + t) * row + h * D + c] * qkv[(b * T + j) * row + (H + g) * D + c];
          s.push_back(d / std::sqrt(double(D)));
        }
        double z = std::exp(sinks[size_t(h)]);
        for (double x : s) z += std::exp(x);
        EXPECT_NEAR(lse[size_t((b * H + h) * T + t)], std::log(z), 1e-12);
        for (int c = 0; c < D; ++c) {
          double o = 0;
          for (int j = 0; j <= t; ++j) o += std::exp(s[size_t(j)]) / z * qkv[(b * T + j) * row + (H + KVH + g) * D + c];
          EXPECT_NEAR(out[size_t((b * T + t) * H * D + h * D + c)], o, 1e-12);
        }
      }
  auto f = [&] {
    Vec o, l;
    forward(o, l);
    return dot(o, R);
  };
  Vec dsinks(size_t(H), 0.0), dqkv(qkv.size(), 1e30);
  attention_sinks_backward(dsinks.data(), R.data(), out.data(), lse.data(), sinks.data(), B, T, H, D);
  attention_backward(dqkv.data(), R.data(), qkv.data(), out.data(), lse.data(), nullptr, B, T, H, KVH, D);
  expect_grad_matches(sinks, dsinks, f, "dsinks");
  expect_grad_matches(qkv, dqkv, f, "dqkv", 300);
}

}  // namespace
}  // namespace mt::cpu

// The model-family variants' kernels on the CPU reference: sliding-window attention (with packed
// documents and a non-default scale) against a naive masked reference and finite differences;
// Gemma's 1 + w RMSNorm, the q/k norms (per head and whole-projection) and GeGLU against finite
// differences. Objective L = sum(out * R) with a random R, as gradcheck_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/attention.h"
#include "kernels/lm_head_loss.h"
#include "kernels/qk_norm.h"
#include "kernels/rmsnorm.h"
#include "kernels/swiglu.h"
#include "tests/kernels/test_util.h"

namespace mt::cpu {
namespace {

using test::dot;
using test::expect_grad_matches;
using test::random_vec;
using Vec = std::vector<double>;

struct Shape {
  int B, T, H, KVH, D;
  long row() const { return long(H + 2 * KVH) * D; }
  size_t qkv() const { return size_t(B) * T * row(); }
  size_t out() const { return size_t(B) * T * H * D; }
};

// Naive attention in double: query t of row b sees keys j <= t with j in its document
// (pos: t - pos[t] <= j) and, with a window W, t - j < W; scores soft-capped when asked.
void reference(const Shape& s, const Vec& qkv, const std::vector<int32_t>* pos, AttentionOptions o, Vec& out) {
  const double scale = o.scale > 0 ? o.scale : 1.0 / std::sqrt(double(s.D));
  out.assign(s.out(), 0.0);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.H; ++h)
      for (int t = 0; t < s.T; ++t) {
        const int g = h / (s.H / s.KVH);
        int first = pos ? t - (*pos)[size_t(b * s.T + t)] : 0;
        if (o.window > 0) first = std::max(first, t - o.window + 1);
        std::vector<double> sc;
        double mx = -1e300;
        for (int j = first; j <= t; ++j) {
          double d = 0;
          for (int c = 0; c < s.D; ++c)
            d += qkv[size_t((b * s.T + t) * s.row() + h * s.D + c)] * qkv[size_t((b * s.T + j) * s.row() + (s.H + g) * s.D + c)];
          const double z = d * scale;
          sc.push_back(o.softcap > 0 ? o.softcap * std::tanh(z / o.softcap) : z);
          mx = std::max(mx, sc.back());
        }
        double sum = 0;
        for (double x : sc) sum += std::exp(x - mx);
        for (int j = first; j <= t; ++j) {
          const double p = std::exp(sc[size_t(j - first)] - mx) / sum;
          for (int c = 0; c < s.D; ++c)
            out[size_t((b * s.T + t) * s.H * s.D + h * s.D + c)] +=
                p * qkv[size_t((b * s.T + j) * s.row() + (s.H + s.KVH + g) * s.D + c)];
        }
      }
}

// Row 0 one document; the other rows documents of 5, 40 and the rest (positions restart at each).
std::vector<int32_t> packed_positions(const Shape& s) {
  std::vector<int32_t> pos(size_t(s.B) * s.T);
  for (int t = 0; t < s.T; ++t) pos[size_t(t)] = t;
  for (int b = 1; b < s.B; ++b)
    for (int t = 0; t < s.T; ++t) pos[size_t(b * s.T + t)] = t < 5 ? t : t < 45 ? t - 5 : t - 45;
  return pos;
}

void check_window(const Shape& s, AttentionOptions o, bool packed) {
  SCOPED_TRACE("T=" + std::to_string(s.T) + " window=" + std::to_string(o.window) + (packed ? " packed" : ""));
  const std::vector<int32_t> pos = packed_positions(s);
  const int32_t* p = packed ? pos.data() : nullptr;
  Vec qkv = random_vec(s.qkv(), 40 + s.T, -1.5, 1.5);
  Vec ref;
  reference(s, qkv, packed ? &pos : nullptr, o, ref);
  Vec out(s.out()), lse(size_t(s.B) * s.H * s.T);
  attention_forward(out.data(), lse.data(), qkv.data(), p, s.B, s.T, s.H, s.KVH, s.D, o);
  double worst = 0;
  for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::abs(out[i] - ref[i]));
  EXPECT_LT(worst, 1e-12);
  // and float, for the kernel's float path
  const std::vector<float> qf(qkv.begin(), qkv.end());
  std::vector<float> of(s.out()), lf(lse.size());
  attention_forward(of.data(), lf.data(), qf.data(), p, s.B, s.T, s.H, s.KVH, s.D, o);
  worst = 0;
  for (size_t i = 0; i < of.size(); ++i) worst = std::max(worst, std::abs(double(of[i]) - ref[i]));
  EXPECT_LT(worst, 2e-5);
  const Vec R = random_vec(s.out(), 50 + s.T);
  auto f = [&] {
    attention_forward(out.data(), lse.data(), qkv.data(), p, s.B, s.T, s.H, s.KVH, s.D, o);
    return dot(out, R);
  };
  f();
  Vec dqkv(s.qkv(), 1e30);
  attention_backward(dqkv.data(), R.data(), qkv.data(), out.data(), lse.data(), p, s.B, s.T, s.H, s.KVH, s.D, o);
  expect_grad_matches(qkv, dqkv, f, "dqkv", 1500);
}

TEST(SlidingWindowAttention, MatchesNaiveAndFiniteDifferences) {
  check_window({2, 9, 4, 2, 8}, {3, 0}, false);
  check_window({1, 1, 2, 1, 4}, {1, 0}, false);  // a window of one: each query sees itself
  check_window({2, 70, 2, 1, 6}, {5, 0.37}, false);  // past one tile, Gemma-style scale
  check_window({2, 70, 2, 2, 8}, {64, 0}, true);     // the window spans tiles; packed documents
  check_window({2, 70, 4, 2, 4}, {17, 0}, true);
}

// Gemma 2's soft cap of the scaled scores (cap 5 on scores that reach past it), with and
// without a window and documents.
TEST(SoftCappedAttention, MatchesNaiveAndFiniteDifferences) {
  check_window({2, 9, 4, 2, 8}, {0, 0.9, 5.0}, false);
  check_window({2, 70, 2, 1, 6}, {5, 0.8, 3.0}, true);
  check_window({1, 67, 4, 4, 8}, {0, 0, 2.0}, false);
}

TEST(SlidingWindowAttention, AWindowAsLongAsTheSequenceIsFullCausal) {
  const Shape s{2, 33, 4, 2, 8};
  const std::vector<float> qkv = random_vec<float>(s.qkv(), 3);
  std::vector<float> a(s.out()), b(s.out()), la(size_t(s.B) * s.H * s.T), lb(la.size());
  attention_forward(a.data(), la.data(), qkv.data(), nullptr, s.B, s.T, s.H, s.KVH, s.D);
  attention_forward(b.data(), lb.data(), qkv.data(), nullptr, s.B, s.T, s.H, s.KVH, s.D, {s.T, 0});
  EXPECT_EQ(a, b);
  EXPECT_EQ(la, lb);
}

TEST(GradCheckRmsnorm, GemmaOnePlusWeight) {
  const int N = 3, C = 10;
  Vec inp = random_vec(N * C, 61), w = random_vec(C, 62, -0.5, 0.5);
  const Vec R = random_vec(N * C, 63);
  auto f = [&] {
    Vec out(N * C), rstd(N);
    rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C, 1e-6f, 1.f);
    return dot(out, R);
  };
  Vec out(N * C), rstd(N);
  rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C, 1e-6f, 1.f);
  Vec w1 = w;  // the same as w + 1 with offset 0
  for (double& x : w1) x += 1;
  Vec out1(N * C), rstd1(N);
  rmsnorm_forward(out1.data(), rstd1.data(), inp.data(), w1.data(), N, C, 1e-6f);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], out1[i], 1e-15);
  Vec dinp(N * C, 0.0), dw(C, 0.0);
  rmsnorm_backward(dinp.data(), dw.data(), R.data(), inp.data(), w.data(), rstd.data(), N, C, 1.f);
  expect_grad_matches(inp, dinp, f, "dinp");
  expect_grad_matches(w, dw, f, "dweight");
}

void check_qk_norm(bool per_head, float offset) {
  SCOPED_TRACE(per_head ? "per head" : "whole projection");
  const QkNormShape s{5, 4, 2, 6, per_head};
  const size_t n = size_t(s.N) * size_t(s.row());
  Vec raw = random_vec(n, 71), wq = random_vec(size_t(s.q_width()), 72, 0.5, 1.5);
  Vec wk = random_vec(size_t(s.k_width()), 73, 0.5, 1.5);
  const Vec R = random_vec(n, 74);
  Vec qkv(n), rstd(size_t(s.N) * s.vectors());
  auto f = [&] {
    qk_norm_forward(qkv.data(), rstd.data(), raw.data(), wq.data(), wk.data(), s, 1e-6f, offset);
    return dot(qkv, R);
  };
  f();
  for (int t = 0; t < s.N; ++t)  // v passes through
    for (long c = s.row() - long(s.KVH) * s.D; c < s.row(); ++c)
      EXPECT_EQ(qkv[size_t(t * s.row() + c)], raw[size_t(t * s.row() + c)]);
  Vec draw(n, 1e30), dwq(wq.size(), 0.0), dwk(wk.size(), 0.0);
  qk_norm_backward(draw.data(), dwq.data(), dwk.data(), R.data(), raw.data(), wq.data(), wk.data(), rstd.data(), s,
                   offset);
  expect_grad_matches(raw, draw, f, "draw");
  expect_grad_matches(wq, dwq, f, "dwq");
  expect_grad_matches(wk, dwk, f, "dwk");
}

TEST(GradCheckQkNorm, PerHeadAndWholeProjection) {
  check_qk_norm(true, 0.f);
  check_qk_norm(false, 0.f);
  check_qk_norm(true, 1.f);  // Gemma 3's
}

// Final logit soft-capping in the fused head: the loss against a direct computation, dx and dW
// against finite differences (the loss is the objective: grad_scale 1).
TEST(GradCheckLmHeadLoss, SoftCappedLogits) {
  const int N = 5, C = 6, V = 11, chunk = 2;
  const double cap = 1.5;
  Vec x = random_vec(N * C, 91, -2, 2), W = random_vec(V * C, 92, -2, 2);
  const std::vector<int32_t> targets = {3, -1, 10, 0, 7};
  Vec scratch(size_t(chunk) * V);
  auto f = [&] {
    return lm_head_loss<double>(nullptr, nullptr, nullptr, x.data(), W.data(), targets.data(), N, C, V, chunk, 1.0,
                                scratch.data(), float(cap)).loss_sum;
  };
  double want = 0;
  for (int n = 0; n < N; ++n) {
    if (targets[size_t(n)] < 0) continue;
    std::vector<double> z(V);
    double mx = -1e300, sum = 0;
    for (int v = 0; v < V; ++v) {
      double d = 0;
      for (int c = 0; c < C; ++c) d += x[size_t(n * C + c)] * W[size_t(v * C + c)];
      z[size_t(v)] = cap * std::tanh(d / cap);
      mx = std::max(mx, z[size_t(v)]);
    }
    for (double e : z) sum += std::exp(e - mx);
    want += mx + std::log(sum) - z[size_t(targets[size_t(n)])];
  }
  EXPECT_NEAR(f(), want, 1e-12);
  Vec dx(N * C, 1e30), dW(V * C, 0.0);
  lm_head_loss<double>(dx.data(), dW.data(), nullptr, x.data(), W.data(), targets.data(), N, C, V, chunk, 1.0,
                       scratch.data(), float(cap));
  expect_grad_matches(x, dx, f, "dx");
  expect_grad_matches(W, dW, f, "dW");
}

TEST(GradCheckGeglu, GeluTanhGate) {
  const int N = 3, F = 7;
  Vec gu = random_vec(N * 2 * F, 81, -4.0, 4.0);
  const Vec R = random_vec(N * F, 82);
  auto f = [&] {
    Vec out(N * F);
    swiglu_forward(out.data(), gu.data(), N, F, GateActivation::kGeluTanh);
    return dot(out, R);
  };
  Vec out(N * F);
  swiglu_forward(out.data(), gu.data(), N, F, GateActivation::kGeluTanh);
  const double g = gu[0], u = gu[F];  // torch's gelu(approximate="tanh")
  EXPECT_NEAR(out[0], 0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g))) * u, 1e-14);
  Vec dgu(gu.size(), 1e30);
  swiglu_backward(dgu.data(), R.data(), gu.data(), N, F, GateActivation::kGeluTanh);
  expect_grad_matches(gu, dgu, f, "dgu");
}

}  // namespace
}  // namespace mt::cpu

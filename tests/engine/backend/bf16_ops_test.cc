// Every op of the CPU bf16 table (cpu_ops<bf16>) against the fp32 CPU reference (cpu_ops<float>)
// run on the same bf16 values widened to fp32, at odd shapes. Outputs are poisoned with NaN
// first, and every comparison fails on NaN.
//
// Tolerances (bf16 keeps 8 significant bits: rounding to nearest moves a value by at most
// 2^-8 of itself, one half-ulp):
//  * a bf16 output rounded once from the fp32 result: |got - ref| <= 2^-8 |ref| + abs, where
//    abs covers the fp32 summation-order difference of a GEMM (bf16 GEMM vs sgemm), at most
//    K * 2^-24 * sum|a||b|; we allow 1e-5 of the output's scale, far above that for K < 100;
//  * an fp32 output (statistics, weight gradients): only summation order differs, 1e-5 of
//    the output's scale;
//  * the LM head rounds d(logits) to bf16 before its two backward GEMMs (as cuBLASLt's bf16
//    inputs require), so dx and dW also move by up to 2^-8 sum|dlogits||W| (resp. |x|), computed
//    per element below.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/ops.h"

namespace mt {
namespace {

constexpr double kHalfUlp = 1.0 / 256;  // 2^-8: rounding to bf16, relative
constexpr double kOrder = 1e-5;         // fp32 summation order, relative to the output's scale

struct Bf16Data {
  std::vector<bf16> b;
  std::vector<float> f;  // the same values, widened (exact)
};

Bf16Data random_bf16(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::uniform_real_distribution<float> u(-scale, scale);
  Bf16Data d;
  for (size_t i = 0; i < n; ++i) {
    d.b.push_back(float_to_bf16(u(rng)));
    d.f.push_back(bf16_to_float(d.b.back()));
  }
  return d;
}

std::vector<bf16> nan_bf16(size_t n) { return std::vector<bf16>(n, bf16{0x7fc0}); }
std::vector<float> nan_f32(size_t n) { return std::vector<float>(n, std::nanf("")); }

double scale_of(const std::vector<float>& ref) {
  double s = 0;
  for (float x : ref) s = std::max(s, double(std::abs(x)));
  return s;
}

// |got - ref| <= rel |ref| + slack[i] + kOrder * scale; false on NaN.
template <typename G>
void expect_close(const std::vector<G>& got, const std::vector<float>& ref, double rel, const std::string& what,
                  const std::vector<double>& slack = {}) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  const double abs = kOrder * std::max(1e-30, scale_of(ref));
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = to_float(got[i]), r = ref[i];
    const double tol = rel * std::abs(r) + abs + (slack.empty() ? 0.0 : slack[i]);
    ASSERT_TRUE(std::abs(g - r) <= tol) << what << "[" << i << "]: got " << g << ", reference " << r << ", tolerance "
                                        << tol;
  }
}

const Ops<bf16>& B() { return cpu_ops<bf16>(); }
const Ops<float>& F() { return cpu_ops<float>(); }

// Odd shapes: nothing divides anything.
constexpr int kB = 2, kT = 7, kN = kB * kT, kC = 33, kOC = 19, kH = 3, kKVH = 1, kD = 10, kF = 13, kV = 37;
constexpr int kQKV = (kH + 2 * kKVH) * kD, kQ = kH * kD;

TEST(Bf16Ops, MatmulForwardWithBias) {
  std::mt19937 rng(1);
  auto x = random_bf16(size_t(kN) * kC, rng), w = random_bf16(size_t(kOC) * kC, rng), b = random_bf16(kOC, rng);
  auto out = nan_bf16(size_t(kN) * kOC);
  auto ref = nan_f32(out.size());
  B().matmul_forward(out.data(), x.b.data(), w.b.data(), b.b.data(), kN, kC, kOC);
  F().matmul_forward(ref.data(), x.f.data(), w.f.data(), b.f.data(), kN, kC, kOC);
  expect_close(out, ref, kHalfUlp, "out");
}

TEST(Bf16Ops, MatmulBackwardAccumulatesFp32WeightGradients) {
  std::mt19937 rng(2);
  auto x = random_bf16(size_t(kN) * kC, rng), w = random_bf16(size_t(kOC) * kC, rng);
  auto dout = random_bf16(size_t(kN) * kOC, rng);
  auto dinp0 = random_bf16(size_t(kN) * kC, rng);  // += into existing values
  std::vector<float> dw(size_t(kOC) * kC, 0.25f), db(kOC, -0.5f), dw_ref = dw, db_ref = db;
  std::vector<bf16> dinp = dinp0.b;
  std::vector<float> dinp_ref = dinp0.f;
  B().matmul_backward(dinp.data(), dw.data(), db.data(), dout.b.data(), x.b.data(), w.b.data(), kN, kC, kOC);
  F().matmul_backward(dinp_ref.data(), dw_ref.data(), db_ref.data(), dout.f.data(), x.f.data(), w.f.data(), kN, kC, kOC);
  expect_close(dinp, dinp_ref, kHalfUlp, "dinp");
  expect_close(dw, dw_ref, 0, "dw");
  expect_close(db, db_ref, 0, "db");
}

TEST(Bf16Ops, RmsnormForwardAndBackward) {
  std::mt19937 rng(3);
  auto x = random_bf16(size_t(kN) * kC, rng, 3.0f), w = random_bf16(kC, rng), dout = random_bf16(size_t(kN) * kC, rng);
  auto out = nan_bf16(size_t(kN) * kC);
  auto rstd = nan_f32(kN), out_ref = nan_f32(out.size()), rstd_ref = nan_f32(kN);
  B().rmsnorm_forward(out.data(), rstd.data(), x.b.data(), w.b.data(), kN, kC, 1e-5f, 0.f);
  F().rmsnorm_forward(out_ref.data(), rstd_ref.data(), x.f.data(), w.f.data(), kN, kC, 1e-5f, 0.f);
  expect_close(out, out_ref, kHalfUlp, "out");
  expect_close(rstd, rstd_ref, 0, "rstd (fp32)");
  auto dinp0 = random_bf16(size_t(kN) * kC, rng);
  std::vector<bf16> dinp = dinp0.b;
  std::vector<float> dinp_ref = dinp0.f, dw(kC, 0.125f), dw_ref = dw;
  B().rmsnorm_backward(dinp.data(), dw.data(), dout.b.data(), x.b.data(), w.b.data(), rstd.data(), kN, kC, 0.f);
  F().rmsnorm_backward(dinp_ref.data(), dw_ref.data(), dout.f.data(), x.f.data(), w.f.data(), rstd_ref.data(), kN, kC, 0.f);
  expect_close(dinp, dinp_ref, kHalfUlp, "dinp");
  expect_close(dw, dw_ref, 0, "dw (fp32)");
}

TEST(Bf16Ops, RopeForwardAndBackwardWithFp32Angles) {
  std::mt19937 rng(4);
  std::vector<float> inv_freq(kD / 2);
  for (int i = 0; i < kD / 2; ++i) inv_freq[size_t(i)] = float(std::pow(10000.0, -2.0 * i / kD));
  auto qkv = random_bf16(size_t(kN) * kQKV, rng);
  std::vector<bf16> x = qkv.b;
  std::vector<float> x_ref = qkv.f;
  B().rope_forward(x.data(), inv_freq.data(), nullptr, kB, kT, kH, kKVH, kD, 1.f);
  F().rope_forward(x_ref.data(), inv_freq.data(), nullptr, kB, kT, kH, kKVH, kD, 1.f);
  expect_close(x, x_ref, kHalfUlp, "rope_forward");
  x = qkv.b, x_ref = qkv.f;
  B().rope_backward(x.data(), inv_freq.data(), nullptr, kB, kT, kH, kKVH, kD, 1.f);
  F().rope_backward(x_ref.data(), inv_freq.data(), nullptr, kB, kT, kH, kKVH, kD, 1.f);
  expect_close(x, x_ref, kHalfUlp, "rope_backward");
}

TEST(Bf16Ops, AttentionForwardAndBackwardKeepFp32LogSumExp) {
  std::mt19937 rng(5);
  auto qkv = random_bf16(size_t(kN) * kQKV, rng, 2.0f), dout = random_bf16(size_t(kN) * kQ, rng);
  auto out = nan_bf16(size_t(kN) * kQ);
  auto lse = nan_f32(size_t(kN) * kH), out_ref = nan_f32(out.size()), lse_ref = nan_f32(lse.size());
  B().attention_forward(out.data(), lse.data(), qkv.b.data(), nullptr, {}, kB, kT, kH, kKVH, kD);
  F().attention_forward(out_ref.data(), lse_ref.data(), qkv.f.data(), nullptr, {}, kB, kT, kH, kKVH, kD);
  expect_close(out, out_ref, kHalfUlp, "out");
  expect_close(lse, lse_ref, 0, "lse (fp32)");
  // The backward reads the bf16 output the forward stored (the reference reads it widened).
  std::vector<float> out_w(out.size());
  for (size_t i = 0; i < out.size(); ++i) out_w[i] = bf16_to_float(out[i]);
  auto dqkv = nan_bf16(size_t(kN) * kQKV);
  auto dqkv_ref = nan_f32(dqkv.size());
  B().attention_backward(dqkv.data(), dout.b.data(), qkv.b.data(), out.data(), lse.data(), nullptr, {}, kB, kT, kH, kKVH, kD);
  F().attention_backward(dqkv_ref.data(), dout.f.data(), qkv.f.data(), out_w.data(), lse.data(), nullptr, {}, kB, kT, kH, kKVH, kD);
  expect_close(dqkv, dqkv_ref, kHalfUlp, "dqkv");
}

TEST(Bf16Ops, SwigluForwardAndBackward) {
  std::mt19937 rng(6);
  auto gu = random_bf16(size_t(kN) * 2 * kF, rng, 3.0f), dout = random_bf16(size_t(kN) * kF, rng);
  auto out = nan_bf16(size_t(kN) * kF);
  auto out_ref = nan_f32(out.size());
  B().swiglu_forward(out.data(), gu.b.data(), kN, kF, GateActivation::kSilu);
  F().swiglu_forward(out_ref.data(), gu.f.data(), kN, kF, GateActivation::kSilu);
  expect_close(out, out_ref, kHalfUlp, "out");
  auto dgu = nan_bf16(gu.b.size());
  auto dgu_ref = nan_f32(dgu.size());
  B().swiglu_backward(dgu.data(), dout.b.data(), gu.b.data(), kN, kF, GateActivation::kSilu);
  F().swiglu_backward(dgu_ref.data(), dout.f.data(), gu.f.data(), kN, kF, GateActivation::kSilu);
  expect_close(dgu, dgu_ref, kHalfUlp, "dgu");
}

TEST(Bf16Ops, EmbeddingCopiesRowsExactlyAndAccumulatesFp32) {
  std::mt19937 rng(7);
  auto wte = random_bf16(size_t(kV) * kC, rng), dout = random_bf16(size_t(kN) * kC, rng);
  std::vector<int32_t> tokens(kN);
  for (int i = 0; i < kN; ++i) tokens[size_t(i)] = int32_t((i * 7 + 3) % 5);  // repeats: rows accumulate
  auto out = nan_bf16(size_t(kN) * kC);
  B().embedding_forward(out.data(), tokens.data(), wte.b.data(), kN, kC);
  for (int i = 0; i < kN; ++i)
    for (int c = 0; c < kC; ++c)
      ASSERT_EQ(out[size_t(i) * kC + size_t(c)].bits, wte.b[size_t(tokens[size_t(i)]) * kC + size_t(c)].bits);
  std::vector<float> dwte(size_t(kV) * kC, 1.0f), dwte_ref = dwte;
  B().embedding_backward(dwte.data(), dout.b.data(), tokens.data(), kN, kC);
  F().embedding_backward(dwte_ref.data(), dout.f.data(), tokens.data(), kN, kC);
  expect_close(dwte, dwte_ref, 0, "dwte (fp32)");
}

TEST(Bf16Ops, AddInplaceRoundsTheFp32SumOnce) {
  std::mt19937 rng(8);
  auto y = random_bf16(1001, rng), x = random_bf16(1001, rng);
  std::vector<bf16> got = y.b;
  B().add_inplace(got.data(), x.b.data(), got.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i].bits, float_to_bf16(y.f[i] + x.f[i]).bits) << i;
}

// Per-element bound of the error that rounding d(logits) to bf16 adds to a product sum:
// 2^-8 * sum_k |dl[r, k]| |m[k, c]| (as gemm(dl, m) with dl [rows, K], m [K, cols]).
std::vector<double> dlogits_slack(const std::vector<float>& dl, const std::vector<float>& m, int rows, int K, int cols,
                                  bool trans_dl) {
  std::vector<double> s(size_t(rows) * cols, 0.0);
  for (int r = 0; r < rows; ++r)
    for (int k = 0; k < K; ++k) {
      const double a = std::abs(trans_dl ? dl[size_t(k) * rows + size_t(r)] : dl[size_t(r) * K + size_t(k)]);
      for (int c = 0; c < cols; ++c) s[size_t(r) * cols + size_t(c)] += kHalfUlp * a * std::abs(m[size_t(k) * cols + size_t(c)]);
    }
  return s;
}

TEST(Bf16Ops, LmHeadLossInFp32WithBf16DLogits) {
  std::mt19937 rng(9);
  const int chunk = 4;  // does not divide N
  auto x = random_bf16(size_t(kN) * kC, rng, 2.0f), W = random_bf16(size_t(kV) * kC, rng);
  std::vector<int32_t> targets(kN);
  for (int i = 0; i < kN; ++i) targets[size_t(i)] = i % 4 == 1 ? -1 : int32_t((i * 5) % kV);
  const float gs = 1.0f / 11;
  auto dx = nan_bf16(size_t(kN) * kC);
  std::vector<float> dW(size_t(kV) * kC, 0.5f), losses = nan_f32(kN);
  std::vector<char> scratch(lm_head_scratch_bytes<bf16>(chunk, kV));
  double totals[2];
  B().lm_head_loss(dx.data(), dW.data(), losses.data(), x.b.data(), W.b.data(), targets.data(), kN, kC, kV, chunk, gs, 0.f,
                   scratch.data(), totals);
  auto dx_ref = nan_f32(dx.size());
  std::vector<float> dW_ref(dW.size(), 0.5f), losses_ref = nan_f32(kN);
  std::vector<float> scratch_ref(size_t(kN) * kV);  // one chunk of all rows: the reference's d(logits), kept
  double totals_ref[2];
  F().lm_head_loss(dx_ref.data(), dW_ref.data(), losses_ref.data(), x.f.data(), W.f.data(), targets.data(), kN, kC, kV,
                   kN, gs, 0.f, scratch_ref.data(), totals_ref);
  EXPECT_EQ(totals[1], totals_ref[1]);
  ASSERT_TRUE(std::abs(totals[0] - totals_ref[0]) <= kOrder * std::abs(totals_ref[0])) << totals[0] << " vs " << totals_ref[0];
  expect_close(losses, losses_ref, 0, "losses (fp32)");
  // scratch_ref now holds the reference d(logits) [N, V]: dx = dl @ W, dW += dl^T @ x.
  expect_close(dx, dx_ref, kHalfUlp, "dx", dlogits_slack(scratch_ref, W.f, kN, kV, kC, false));
  expect_close(dW, dW_ref, 0, "dW (fp32)", dlogits_slack(scratch_ref, x.f, kV, kN, kC, true));
}

}  // namespace
}  // namespace mt

// The CUDA bf16 op table (CudaBackend::ops<bf16>()) against the CPU bf16 table (cpu_ops<bf16>(),
// the reference), op by op at odd shapes, on identical inputs: a backward op gets the CPU
// forward's outputs (activations, rstd, lse) on both sides. Both tables read bf16, compute in
// fp32 and round each bf16 output once at the same points (docs/ARCHITECTURE.md, "Mixed
// precision"), so they differ only in summation order (and in fp32 exp/FMA rounding):
//  * a bf16 output may then differ by an ulp flip where the two fp32 values straddle a
//    rounding boundary: the check allows 2 bf16 ulps of the reference element plus a small
//    slack relative to the tensor's rms, for elements that cancel to far below the tensor's
//    scale (there a bf16 ulp is smaller than the fp32 noise of the sum); the slack is stated
//    per op and sits far above the fp32 sum-order noise (~sqrt(K) 2^-24 of the terms) and far
//    below a missing or misplaced term (~rms / sqrt(K));
//  * an fp32 output (statistics, weight gradients, losses) differs by fp32 sum-order noise
//    only: a relative tolerance of (|ref| + rms) stated per op;
//  * copies, the embedding lookup and y += x are bit-exact (no sums to reorder).
// Outputs are poisoned with NaN first (accumulating ones prefilled with data), and NaN never
// passes. Skips without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "engine/backend/backend.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "kernels/cuda/attention_cudnn.cuh"
#include "tests/cuda/bf16_ops_util.h"
#include "tests/cuda/cuda_test_util.h"

namespace mt {
namespace {

using cudatest::DeviceBuf;
using namespace bf16test;

// out = inp @ w^T + b rounds once (bias + fp32 GEMM); dinp += rounds once; dw, db fp32.
TEST_F(CudaBf16Ops, MatmulForwardBackward) {
  struct S {
    int N, C, OC;
    bool bias;
  };
  for (const S s : {S{37, 129, 67, true}, S{5, 257, 3, false}, S{130, 33, 200, true}}) {
    SCOPED_TRACE(testing::Message() << "N=" << s.N << " C=" << s.C << " OC=" << s.OC << " bias=" << s.bias);
    const size_t ni = size_t(s.N) * s.C, nw = size_t(s.OC) * s.C, no = size_t(s.N) * s.OC;
    const auto x = rnd16(ni, 1), w = rnd16(nw, 2), b = rnd16(size_t(s.OC), 3), dy = rnd16(no, 4), dx0 = rnd16(ni, 5);
    const auto dw0 = cudatest::random_floats(nw, 6), db0 = cudatest::random_floats(size_t(s.OC), 7);
    std::vector<bf16> out(no), dx = dx0;
    std::vector<float> dw = dw0, db = db0;
    const bf16* bias = s.bias ? b.data() : nullptr;
    cpu().matmul_forward(out.data(), x.data(), w.data(), bias, s.N, s.C, s.OC);
    cpu().matmul_backward(dx.data(), dw.data(), s.bias ? db.data() : nullptr, dy.data(), x.data(), w.data(), s.N, s.C,
                          s.OC);
    DeviceBuf<bf16> gx(x), gw(w), gb(b), gdy(dy), gout(no), gdx(dx0);
    DeviceBuf<float> gdw(dw0), gdb(db0);
    settle();
    gpu().matmul_forward(gout.get(), gx.get(), gw.get(), s.bias ? gb.get() : nullptr, s.N, s.C, s.OC);
    gpu().matmul_backward(gdx.get(), gdw.get(), s.bias ? gdb.get() : nullptr, gdy.get(), gx.get(), gw.get(), s.N, s.C,
                          s.OC);
    expect_no_device_error();
    // GEMM outputs: fp32 sums of up to 257 exact bf16 products (tensor cores may truncate in
    // their fp32 accumulation): noise well under 2^-10 of the rms.
    expect_bf16_near(gout.download(), out, 2, 1.0 / 1024, "out");
    expect_bf16_near(gdx.download(), dx, 2, 1.0 / 1024, "dinp (+=)");
    // dw: the prefill plus an fp32 sum over N rows, in another order: 1e-4 of the scale.
    expect_f32_near(gdw.download(), dw, 1e-4, "dweight (fp32, +=)");
    if (s.bias) expect_f32_near(gdb.download(), db, 1e-5, "dbias (fp32, +=)");
    else EXPECT_EQ(gdb.download(), db0) << "dbias untouched when nullptr";
  }
}

// out and dinp round once; rstd and dweight fp32.
TEST_F(CudaBf16Ops, RmsnormForwardBackward) {
  struct S {
    int N, C;
  };
  for (const S s : {S{3, 7}, S{129, 257}, S{300, 1000}}) {
    SCOPED_TRACE(testing::Message() << "N=" << s.N << " C=" << s.C);
    const size_t n = size_t(s.N) * s.C;
    const auto x = rnd16(n, 1, -2, 2), w = rnd16(size_t(s.C), 2, 0.5, 1.5), dy = rnd16(n, 3), dx0 = rnd16(n, 4);
    const auto dw0 = cudatest::random_floats(size_t(s.C), 5);
    std::vector<bf16> out(n), dx = dx0;
    std::vector<float> rstd(size_t(s.N)), dw = dw0;
    cpu().rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), s.N, s.C, 1e-5f, 0.f);
    cpu().rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), s.N, s.C, 0.f);
    DeviceBuf<bf16> gx(x), gw(w), gdy(dy), gout(n), gdx(dx0);
    DeviceBuf<float> grstd(size_t(s.N)), grstd_ref(rstd), gdw(dw0);
    settle();
    gpu().rmsnorm_forward(gout.get(), grstd.get(), gx.get(), gw.get(), s.N, s.C, 1e-5f, 0.f);
    gpu().rmsnorm_backward(gdx.get(), gdw.get(), gdy.get(), gx.get(), gw.get(), grstd_ref.get(), s.N, s.C, 0.f);
    expect_no_device_error();
    // rstd: a double sum of squares rounded to fp32 on both: at most an fp32 ulp or two.
    expect_f32_near(grstd.download(), rstd, 1e-6, "rstd (fp32)");
    // out = x * rstd * w, elementwise: an ulp flip at most.
    expect_bf16_near(gout.download(), out, 2, 1.0 / 4096, "out");
    // dinp: dy*w*r - k*x cancels; the slack covers elements far below the scale.
    expect_bf16_near(gdx.download(), dx, 2, 1.0 / 4096, "dinp (+=)");
    // dweight: fp32 sums over N rows in blocks (GPU) or in order (CPU).
    expect_f32_near(gdw.download(), dw, 1e-5, "dweight (fp32, +=)");
  }
}

// In place on q and k; angles from the same fp32 inv_freq on both, in double.
TEST_F(CudaBf16Ops, RopeForwardBackward) {
  struct S {
    int B, T, H, KVH, D;
  };
  for (const S s : {S{2, 37, 4, 2, 18}, S{1, 301, 3, 1, 64}}) {
    SCOPED_TRACE(testing::Message() << "T=" << s.T << " D=" << s.D);
    const size_t n = size_t(s.B) * s.T * size_t(s.H + 2 * s.KVH) * s.D;
    std::vector<float> inv(size_t(s.D / 2));
    for (int i = 0; i < s.D / 2; ++i) inv[size_t(i)] = float(std::pow(10000.0, -2.0 * i / s.D));
    const auto q = rnd16(n, 7, -3, 3);
    DeviceBuf<float> ginv(inv);
    for (int dir = 0; dir < 2; ++dir) {
      std::vector<bf16> ref = q;
      DeviceBuf<bf16> g(q);
      settle();
      if (dir == 0) cpu().rope_forward(ref.data(), inv.data(), nullptr, s.B, s.T, s.H, s.KVH, s.D, 1.f);
      else cpu().rope_backward(ref.data(), inv.data(), nullptr, s.B, s.T, s.H, s.KVH, s.D, 1.f);
      if (dir == 0) gpu().rope_forward(g.get(), ginv.get(), nullptr, s.B, s.T, s.H, s.KVH, s.D, 1.f);
      else gpu().rope_backward(g.get(), ginv.get(), nullptr, s.B, s.T, s.H, s.KVH, s.D, 1.f);
      expect_no_device_error();
      // x1*c - x2*s: two products (FMA-contracted on the GPU), one rounding.
      expect_bf16_near(g.download(), ref, 2, 1.0 / 4096, dir == 0 ? "rope forward" : "rope backward");
    }
  }
}

// out rounds once from the fp32 online softmax; lse fp32; dqkv (overwritten) rounds once.
TEST_F(CudaBf16Ops, AttentionForwardBackward) {
  struct S {
    int B, T, H, KVH, D;
  };
  for (const S s : {S{2, 37, 4, 2, 20}, S{1, 133, 3, 1, 72}}) {
    SCOPED_TRACE(testing::Message() << "B=" << s.B << " T=" << s.T << " H=" << s.H << " KVH=" << s.KVH
                                    << " D=" << s.D);
    const size_t rows = size_t(s.B) * s.T, nqkv = rows * size_t(s.H + 2 * s.KVH) * s.D, nout = rows * s.H * s.D;
    const size_t nlse = size_t(s.B) * s.H * s.T;
    const auto qkv = rnd16(nqkv, 1, -2, 2), dout = rnd16(nout, 2);
    std::vector<bf16> out(nout), dqkv(nqkv);
    std::vector<float> lse(nlse);
    cpu().attention_forward(out.data(), lse.data(), qkv.data(), nullptr, {}, s.B, s.T, s.H, s.KVH, s.D);
    cpu().attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), nullptr, {}, s.B, s.T, s.H, s.KVH, s.D);
    DeviceBuf<bf16> gqkv(qkv), gdout(dout), gout(nout), gout_ref(out), gdqkv(nqkv);
    DeviceBuf<float> glse(nlse), glse_ref(lse);
    settle();
    gpu().attention_forward(gout.get(), glse.get(), gqkv.get(), nullptr, {}, s.B, s.T, s.H, s.KVH, s.D);
    gpu().attention_backward(gdqkv.get(), gdout.get(), gqkv.get(), gout_ref.get(), glse_ref.get(), nullptr, {}, s.B, s.T, s.H,
                             s.KVH, s.D);
    expect_no_device_error();
    // Sums over up to T keys in fp32, in tiles of 32 (GPU) or the CPU's tiles.
    expect_f32_near(glse.download(), lse, 1e-5, "lse (fp32)");
    expect_bf16_near(gout.download(), out, 2, 1.0 / 1024, "out");
    // dK/dV sum over query rows and heads; dQ over keys: cancelling fp32 sums.
    expect_bf16_near(gdqkv.download(), dqkv, 2, 1.0 / 1024, "dqkv");
  }
}

TEST_F(CudaBf16Ops, SwigluForwardBackward) {
  const int N = 37, F = 129;
  const size_t n = size_t(N) * F;
  const auto gu = rnd16(2 * n, 11, -6, 6), dy = rnd16(n, 12);
  std::vector<bf16> out(n), dgu(2 * n);
  cpu().swiglu_forward(out.data(), gu.data(), N, F, GateActivation::kSilu);
  cpu().swiglu_backward(dgu.data(), dy.data(), gu.data(), N, F, GateActivation::kSilu);
  DeviceBuf<bf16> ggu(gu), gdy(dy), gout(n), gdgu(2 * n);
  settle();
  gpu().swiglu_forward(gout.get(), ggu.get(), N, F, GateActivation::kSilu);
  gpu().swiglu_backward(gdgu.get(), gdy.get(), ggu.get(), N, F, GateActivation::kSilu);
  expect_no_device_error();
  // Elementwise; the two sides' fp32 exp differ by an fp32 ulp or two: an ulp flip at most.
  expect_bf16_near(gout.download(), out, 2, 1.0 / 4096, "swiglu out");
  expect_bf16_near(gdgu.download(), dgu, 2, 1.0 / 4096, "swiglu dgu (overwritten)");
}

// Forward: an exact row copy. Backward: fp32 dwte += rows in token order on both sides (the
// same fp32 additions in the same order), so bit-identical.
TEST_F(CudaBf16Ops, EmbeddingForwardBackward) {
  const int N = 300, C = 67, V = 97;
  std::mt19937 rng(5);
  std::vector<int32_t> tok(static_cast<size_t>(N));
  for (auto& t : tok) t = int32_t(rng() % V);
  const auto wte = rnd16(size_t(V) * C, 1), dout = rnd16(size_t(N) * C, 2);
  const auto dwte0 = cudatest::random_floats(size_t(V) * C, 3);
  std::vector<bf16> out(size_t(N) * C);
  std::vector<float> dwte = dwte0;
  cpu().embedding_forward(out.data(), tok.data(), wte.data(), N, C);
  cpu().embedding_backward(dwte.data(), dout.data(), tok.data(), N, C);
  DeviceBuf<int32_t> gtok(tok);
  DeviceBuf<bf16> gwte(wte), gdout(dout), gout(out.size());
  DeviceBuf<float> gdwte(dwte0);
  settle();
  gpu().embedding_forward(gout.get(), gtok.get(), gwte.get(), N, C);
  gpu().embedding_backward(gdwte.get(), gdout.get(), gtok.get(), N, C);
  expect_no_device_error();
  expect_bits(gout.download(), out, "embedding forward (a copy)");
  cudatest::expect_bitwise(gdwte.download(), dwte, "embedding backward (fp32, token order)");
}

// The head: fp32 logits from a bf16 GEMM, softmax/CE in fp32, d(logits) * grad_scale rounded
// to bf16, dx (overwritten) rounded once, dW += in fp32; the totals stay on the device.
TEST_F(CudaBf16Ops, LmHeadLoss) {
  struct S {
    int N, C, V, chunk;
  };
  for (const S s : {S{65, 40, 1001, 32}, S{7, 33, 517, 100}, S{130, 64, 4099, 64}}) {
    SCOPED_TRACE(testing::Message() << "N=" << s.N << " C=" << s.C << " V=" << s.V << " chunk=" << s.chunk);
    const auto x = rnd16(size_t(s.N) * s.C, 1, -2, 2), W = rnd16(size_t(s.V) * s.C, 2, -0.5, 0.5);
    const auto dW0 = cudatest::random_floats(size_t(s.V) * s.C, 3, -1e-2, 1e-2);
    std::vector<int32_t> tg(size_t(s.N));
    for (int i = 0; i < s.N; ++i) tg[size_t(i)] = (i % 7 == 3) ? -1 : int32_t((i * 7919) % s.V);
    const float gs = 1.0f / float(s.N);
    const size_t scratch = lm_head_scratch_bytes<bf16>(s.chunk, s.V);
    std::vector<bf16> dx(size_t(s.N) * s.C);
    std::vector<float> dW = dW0, losses(size_t(s.N));
    std::vector<float> cpu_scratch(scratch / sizeof(float) + 1);
    double totals[2] = {0, 0};
    cpu().lm_head_loss(dx.data(), dW.data(), losses.data(), x.data(), W.data(), tg.data(), s.N, s.C, s.V, s.chunk, gs, 0.f,
                       cpu_scratch.data(), totals);
    DeviceBuf<bf16> gx(x), gW(W), gdx(dx.size());
    DeviceBuf<float> gdW(dW0), glosses(size_t(s.N));
    DeviceBuf<char> gscr(scratch);
    DeviceBuf<int32_t> gtg(tg);
    DeviceBuf<double> gtotals(2);
    settle();
    gpu().lm_head_loss(gdx.get(), gdW.get(), glosses.get(), gx.get(), gW.get(), gtg.get(), s.N, s.C, s.V, s.chunk, gs, 0.f,
                       gscr.get(), gtotals.get());
    expect_no_device_error();
    const auto t = gtotals.download();
    EXPECT_EQ(t[1], totals[1]) << "counted targets";
    // Logits differ by fp32 GEMM noise; the CPU sums the softmax in double, the GPU in fp32.
    EXPECT_NEAR(t[0], totals[0], 1e-5 * std::fabs(totals[0]) + 1e-5) << "loss sum";
    expect_f32_near(glosses.download(), losses, 1e-5, "per-token losses (fp32)");
    // d(logits) are rounded to bf16 from fp32 values that differ in their last bits, so a few
    // flip by a bf16 ulp (2^-8 relative) before the dx and dW GEMMs sum them: 2^-7 of the scale.
    expect_bf16_near(gdx.download(), dx, 2, 1.0 / 128, "dx (overwritten)");
    expect_f32_near(gdW.download(), dW, 1.0 / 128, "dW (fp32, +=)");
    // Forward only (evaluation): the same loss, nothing written but the totals.
    DeviceBuf<double> gtotals_fwd(2);
    const auto dW_after = gdW.download();
    settle();
    gpu().lm_head_loss(nullptr, nullptr, nullptr, gx.get(), gW.get(), gtg.get(), s.N, s.C, s.V, s.chunk, gs, 0.f,
                       gscr.get(), gtotals_fwd.get());
    expect_no_device_error();
    const auto tf = gtotals_fwd.download();
    EXPECT_EQ(tf[1], totals[1]) << "counted targets (forward only)";
    EXPECT_NEAR(tf[0], totals[0], 1e-5 * std::fabs(totals[0]) + 1e-5) << "loss sum (forward only)";
    EXPECT_EQ(gdW.download(), dW_after) << "forward only leaves dW alone";
  }
}

TEST_F(CudaBf16Ops, AddCopyZero) {
  const size_t n = 100003;
  const auto a = rnd16(n, 1, -1e3, 1e3), b = rnd16(n, 2);
  std::vector<bf16> sum = a;
  cpu().add_inplace(sum.data(), b.data(), n);
  DeviceBuf<bf16> ga(a), gb(b), gc(n), gz(n);
  settle();
  gpu().add_inplace(ga.get(), gb.get(), n);
  gpu().copy(gc.get(), ga.get(), n - 1);  // the last element stays poisoned
  gpu().zero(gz.get(), n - 2);
  expect_no_device_error();
  expect_bits(ga.download(), sum, "y += x: one fp32 add, rounded to nearest even");
  const auto c = gc.download(), z = gz.download();
  expect_bits(std::vector<bf16>(c.begin(), c.end() - 1), std::vector<bf16>(sum.begin(), sum.end() - 1), "copy");
  EXPECT_EQ(c.back().bits, 0xffff) << "copy wrote past its n";
  int nonzero = 0;
  for (size_t i = 0; i + 2 < n; ++i) nonzero += z[i].bits != 0;
  EXPECT_EQ(nonzero, 0) << "zero";
  EXPECT_EQ(z[n - 2].bits, 0xffff) << "zero wrote past its n";
}

// ---- the model families' variants (engine/model/families.cc) ---------------------------------

// Gemma's 1 + w scale: the same rounding points as w.
TEST_F(CudaBf16Ops, RmsnormOnePlusWeight) {
  const int N = 129, C = 257;
  const size_t n = size_t(N) * C;
  const auto x = rnd16(n, 21, -2, 2), w = rnd16(size_t(C), 22, -0.5, 0.5), dy = rnd16(n, 23), dx0 = rnd16(n, 24);
  const auto dw0 = cudatest::random_floats(size_t(C), 25);
  std::vector<bf16> out(n), dx = dx0;
  std::vector<float> rstd(static_cast<size_t>(N)), dw = dw0;
  cpu().rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f, 1.f);
  cpu().rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C, 1.f);
  DeviceBuf<bf16> gx(x), gw(w), gdy(dy), gout(n), gdx(dx0);
  DeviceBuf<float> grstd(static_cast<size_t>(N)), grstd_ref(rstd), gdw(dw0);
  settle();
  gpu().rmsnorm_forward(gout.get(), grstd.get(), gx.get(), gw.get(), N, C, 1e-6f, 1.f);
  gpu().rmsnorm_backward(gdx.get(), gdw.get(), gdy.get(), gx.get(), gw.get(), grstd_ref.get(), N, C, 1.f);
  expect_no_device_error();
  expect_f32_near(grstd.download(), rstd, 1e-6, "rstd (fp32)");
  expect_bf16_near(gout.download(), out, 2, 1.0 / 4096, "out");
  expect_bf16_near(gdx.download(), dx, 2, 1.0 / 4096, "dinp (+=)");
  expect_f32_near(gdw.download(), dw, 1e-5, "dweight (fp32, +=)");
}

// Per head (Qwen3, Gemma 3) and over the whole projections (OLMo 2): rows of vectors inside the
// qkv rows, v copied through; weight gradients fp32 sums over every vector of every row.
TEST_F(CudaBf16Ops, QkNormPerHeadAndWholeProjection) {
  for (const bool per_head : {true, false}) {
    SCOPED_TRACE(per_head ? "per head" : "whole projection");
    const QkNormShape s{301, 6, 2, 40, per_head};
    const size_t n = size_t(s.N) * size_t(s.row());
    const auto raw = rnd16(n, 31, -2, 2), dy = rnd16(n, 32);
    const auto wq = rnd16(size_t(s.q_width()), 33, 0.5, 1.5), wk = rnd16(size_t(s.k_width()), 34, 0.5, 1.5);
    const auto dwq0 = cudatest::random_floats(wq.size(), 35), dwk0 = cudatest::random_floats(wk.size(), 36);
    std::vector<bf16> out(n), draw(n);
    std::vector<float> rstd(size_t(s.N) * s.vectors()), dwq = dwq0, dwk = dwk0;
    cpu().qk_norm_forward(out.data(), rstd.data(), raw.data(), wq.data(), wk.data(), s, 1e-6f, 0.f);
    cpu().qk_norm_backward(draw.data(), dwq.data(), dwk.data(), dy.data(), raw.data(), wq.data(), wk.data(), rstd.data(),
                           s, 0.f);
    DeviceBuf<bf16> graw(raw), gdy(dy), gwq(wq), gwk(wk), gout(n), gdraw(n);
    DeviceBuf<float> grstd(rstd.size()), grstd_ref(rstd), gdwq(dwq0), gdwk(dwk0);
    settle();
    gpu().qk_norm_forward(gout.get(), grstd.get(), graw.get(), gwq.get(), gwk.get(), s, 1e-6f, 0.f);
    gpu().qk_norm_backward(gdraw.get(), gdwq.get(), gdwk.get(), gdy.get(), graw.get(), gwq.get(), gwk.get(),
                           grstd_ref.get(), s, 0.f);
    expect_no_device_error();
    expect_f32_near(grstd.download(), rstd, 1e-6, "rstd (fp32)");
    expect_bf16_near(gout.download(), out, 2, 1.0 / 4096, "qkv (v copied)");
    expect_bf16_near(gdraw.download(), draw, 2, 1.0 / 4096, "draw (overwritten)");
    expect_f32_near(gdwq.download(), dwq, 1e-5, "dwq (fp32, +=)");
    expect_f32_near(gdwk.download(), dwk, 1e-5, "dwk (fp32, +=)");
  }
}

TEST_F(CudaBf16Ops, GegluForwardBackward) {
  const int N = 37, F = 129;
  const size_t n = size_t(N) * F;
  const auto gu = rnd16(2 * n, 41, -6, 6), dy = rnd16(n, 42);
  std::vector<bf16> out(n), dgu(2 * n);
  cpu().swiglu_forward(out.data(), gu.data(), N, F, GateActivation::kGeluTanh);
  cpu().swiglu_backward(dgu.data(), dy.data(), gu.data(), N, F, GateActivation::kGeluTanh);
  DeviceBuf<bf16> ggu(gu), gdy(dy), gout(n), gdgu(2 * n);
  settle();
  gpu().swiglu_forward(gout.get(), ggu.get(), N, F, GateActivation::kGeluTanh);
  gpu().swiglu_backward(gdgu.get(), gdy.get(), ggu.get(), N, F, GateActivation::kGeluTanh);
  expect_no_device_error();
  // fp32 tanh on both sides (libm and CUDA's tanhf, a few ulps apart): an ulp flip at most.
  expect_bf16_near(gout.download(), out, 2, 1.0 / 4096, "geglu out");
  expect_bf16_near(gdgu.download(), dgu, 2, 1.0 / 4096, "geglu dgu (overwritten)");
}

// One fp32 product rounded once on both sides: bit-identical.
TEST_F(CudaBf16Ops, ScaleInPlaceIsBitExact) {
  const auto y = rnd16(1001, 51, -3, 3);
  std::vector<bf16> ref = y;
  cpu().scale_inplace(ref.data(), 33.941125f, ref.size());
  DeviceBuf<bf16> g(y);
  settle();
  gpu().scale_inplace(g.get(), 33.941125f, y.size());
  expect_no_device_error();
  expect_bits(g.download(), ref, "scale_inplace");
}

// What the attention tests below share: every kernel the CUDA table can run, a backend whose
// workspace fits the shape (cuDNN's included), each kernel's tolerances against the CPU table
// (the SIMT one within AttentionForwardBackward's bounds, the tensor-core and cuDNN ones — a
// bf16 P matrix — within attention_cases.h's kOut / kGrad of the tensor's rms), and the check
// that cuDNN took the calls itself rather than falling back.
constexpr cuda::AttentionKernel kEveryAttentionKernel[] = {cuda::AttentionKernel::kSimt,
                                                           cuda::AttentionKernel::kTensorCore,
                                                           cuda::AttentionKernel::kCudnn};

Result<std::unique_ptr<Backend>> attention_backend(int B, int T, int H, int KVH, int D) {
  CudaBackendOptions o;
  o.attention_workspace_bytes = cuda_attention_workspace_bytes(B, T, H, KVH, D);
  return make_cuda_backend(o);
}

struct AttentionTolerance {
  double lse, out, dqkv;  // fp32 relative; bf16 ulps (2) plus this fraction of the rms
};
AttentionTolerance tolerance_of(cuda::AttentionKernel kernel) {
  if (kernel == cuda::AttentionKernel::kSimt) return {1e-5, 1.0 / 1024, 1.0 / 1024};
  return {1e-3, 1.0 / 128, 1.0 / 64};
}

void expect_cudnn_took_the_calls(cuda::AttentionKernel kernel, uint64_t calls_before) {
  if (kernel == cuda::AttentionKernel::kCudnn && cuda::cudnn_built()) {
    EXPECT_GT(cuda::cudnn_attention_calls(), calls_before) << "cuDNN refused: " << cuda_attention_warning();
  }
}

// Sliding windows (shorter than a document, spanning tiles) with a non-default scale, packed
// documents or not, on every attention kernel, within each kernel's tolerances (above).
TEST_F(CudaBf16Ops, SlidingWindowAttentionOnEveryKernel) {
  const int B = 2, T = 150, H = 4, KVH = 2, D = 64;
  const size_t rows = size_t(B) * T, nqkv = rows * size_t(H + 2 * KVH) * D, nout = rows * H * D, nlse = size_t(B) * H * T;
  std::vector<int32_t> pos;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) pos.push_back(b == 0 ? t : t < 70 ? t : t - 70);  // row 1: documents of 70, 80
  const std::vector<int32_t> starts = document_starts(pos.data(), B, T);
  const auto qkv = rnd16(nqkv, 61, -2, 2), dout = rnd16(nout, 62);
  for (const cuda::AttentionKernel kernel : kEveryAttentionKernel)
    for (const AttentionOptions opt : {AttentionOptions{7, 0}, AttentionOptions{64, 0.1}})
      for (const bool docs : {false, true}) {
        SCOPED_TRACE(testing::Message() << cuda::attention_kernel_name(kernel) << " window " << opt.window << " scale "
                                        << opt.scale << (docs ? " documents" : ""));
        const cudatest::AttentionKernelScope scope(kernel);
        auto b = attention_backend(B, T, H, KVH, D);
        ASSERT_TRUE(b.ok()) << b.status().to_string();
        DeviceBuf<int32_t> gpos(pos), gstarts(starts);
        const DocumentSpans spans{starts.data(), gstarts.get(), int(starts.size()) - 1};
        const Documents cpu_docs(docs ? pos.data() : nullptr), gpu_docs(docs ? gpos.get() : nullptr, docs ? &spans : nullptr);
        std::vector<bf16> out(nout), dqkv(nqkv);
        std::vector<float> lse(nlse);
        cpu().attention_forward(out.data(), lse.data(), qkv.data(), cpu_docs, opt, B, T, H, KVH, D);
        cpu().attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), cpu_docs, opt, B, T, H, KVH, D);
        DeviceBuf<bf16> gqkv(qkv), gdout(dout), gout(nout), gout_ref(out), gdqkv(nqkv);
        DeviceBuf<float> glse(nlse), glse_ref(lse);
        settle();
        const uint64_t cudnn_before = cuda::cudnn_attention_calls();
        const Ops<bf16>& ops = (*b)->ops<bf16>();
        ops.attention_forward(gout.get(), glse.get(), gqkv.get(), gpu_docs, opt, B, T, H, KVH, D);
        ops.attention_backward(gdqkv.get(), gdout.get(), gqkv.get(), gout_ref.get(), glse_ref.get(), gpu_docs, opt, B, T,
                               H, KVH, D);
        ASSERT_EQ(cudaSuccess, cudaDeviceSynchronize());
        EXPECT_TRUE((*b)->error().ok()) << (*b)->error().to_string();
        expect_cudnn_took_the_calls(kernel, cudnn_before);
        const AttentionTolerance tol = tolerance_of(kernel);
        expect_f32_near(glse.download(), lse, tol.lse, "lse (fp32)");
        expect_bf16_near(gout.download(), out, 2, tol.out, "out");
        expect_bf16_near(gdqkv.download(), dqkv, 2, tol.dqkv, "dqkv");
      }
}

// gpt-oss's attention block on every kernel, as layers.cc composes it: attention (with a window
// of 7 keys, or none, as its layers alternate), the sinks folded into out and lse; back, the
// sinks' backward before attention's on the folded out and lse (the CPU's, to isolate the
// backward). The tolerances of SlidingWindowAttentionOnEveryKernel; the sinks' gradient, a sum
// over every row, within 1e-3 (simt) or 2e-2 (bf16 P) of its values plus their rms. cuDNN must
// take the calls itself: the sinks are its output's post-op, not a refusal.
TEST_F(CudaBf16Ops, AttentionWithSinksOnEveryKernel) {
  const int B = 2, T = 96, H = 4, KVH = 2, D = 64;
  const size_t rows = size_t(B) * T, nqkv = rows * size_t(H + 2 * KVH) * D, nout = rows * H * D, nlse = size_t(B) * H * T;
  const auto qkv = rnd16(nqkv, 71, -2, 2), dout = rnd16(nout, 72), sinks = rnd16(size_t(H), 73, -1, 1);
  for (const cuda::AttentionKernel kernel : kEveryAttentionKernel)
    for (const int window : {7, 0}) {
      SCOPED_TRACE(testing::Message() << cuda::attention_kernel_name(kernel) << " window " << window);
      const cudatest::AttentionKernelScope scope(kernel);
      auto b = attention_backend(B, T, H, KVH, D);
      ASSERT_TRUE(b.ok()) << b.status().to_string();
      const AttentionOptions opt{window, 0};
      const Documents none(nullptr);
      std::vector<bf16> out(nout), dqkv(nqkv);
      std::vector<float> lse(nlse), dsinks(size_t(H), 0.f);
      cpu().attention_forward(out.data(), lse.data(), qkv.data(), none, opt, B, T, H, KVH, D);
      cpu().attention_sinks_forward(out.data(), lse.data(), sinks.data(), B, T, H, D);
      cpu().attention_sinks_backward(dsinks.data(), dout.data(), out.data(), lse.data(), sinks.data(), B, T, H, D);
      cpu().attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), none, opt, B, T, H, KVH, D);
      DeviceBuf<bf16> gqkv(qkv), gdout(dout), gsinks(sinks), gout(nout), gout_ref(out), gdqkv(nqkv);
      DeviceBuf<float> glse(nlse), glse_ref(lse), gdsinks(std::vector<float>(size_t(H), 0.f));
      settle();
      const uint64_t cudnn_before = cuda::cudnn_attention_calls();
      const Ops<bf16>& ops = (*b)->ops<bf16>();
      ops.attention_forward(gout.get(), glse.get(), gqkv.get(), none, opt, B, T, H, KVH, D);
      ops.attention_sinks_forward(gout.get(), glse.get(), gsinks.get(), B, T, H, D);
      ops.attention_sinks_backward(gdsinks.get(), gdout.get(), gout_ref.get(), glse_ref.get(), gsinks.get(), B, T, H, D);
      ops.attention_backward(gdqkv.get(), gdout.get(), gqkv.get(), gout_ref.get(), glse_ref.get(), none, opt, B, T, H,
                             KVH, D);
      ASSERT_EQ(cudaSuccess, cudaDeviceSynchronize());
      EXPECT_TRUE((*b)->error().ok()) << (*b)->error().to_string();
      expect_cudnn_took_the_calls(kernel, cudnn_before);
      const AttentionTolerance tol = tolerance_of(kernel);
      const bool simt = kernel == cuda::AttentionKernel::kSimt;
      expect_f32_near(glse.download(), lse, tol.lse, "lse with sinks (fp32)");
      expect_bf16_near(gout.download(), out, 2, tol.out, "out with sinks");
      expect_f32_near(gdsinks.download(), dsinks, simt ? 1e-3 : 2e-2, "dsinks (fp32)");
      expect_bf16_near(gdqkv.download(), dqkv, 2, tol.dqkv, "dqkv under sinks");
    }
}

}  // namespace
}  // namespace mt

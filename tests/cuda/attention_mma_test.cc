// The tensor-core bf16 attention (kernels/cuda/attention_mma_*.cu, head_dim 64 and 128) against
// the CPU reference in double on the same bf16-rounded inputs, against the portable simt kernel
// on the same inputs, and for bit-reproducibility. Shapes cover T = 1, tiles cut mid-way
// (17, 333, 517), exact tiles (64, 2048), GQA groups of 2 and 8, one kv head per head, and packed
// documents with a document of length 1 at the start and at the last token.
//
// Tolerances: those of bf16_test.cc (relative to |ref| + rms(ref): 1/128 out, 1/64 dqkv, 1e-5
// lse) plus, per element, the bound derived for rounding P and dS to bf16 as tensor-core
// operands: each rounded term moves by at most u = 2^-8 of itself, so the element by at most
// u * sum|terms| (sum_j p_j |v_j| / l for out, sum_i P_ij |dO_i| for dV, sum |dS| |q| for dK,
// sum |dS| |k| for dQ), computed by the host emulation of the same algorithm
// (tests/kernels/attention_mma_emulation.h). The plain tolerances alone do not hold where a
// gradient's terms cancel (tests/kernels/attention_tiles_test.cc measures 2.2 x 1/64 for early
// keys at T = 517 with 8 heads per kv head). A wrong mask, index or tile bound is far outside.
// Every failure names its tensor and (b, h, t, d). Skips without a device.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <random>
#include <string>

#include "kernels/attention.h"
#include "kernels/cuda/attention.cuh"
#include "tests/cuda/cuda_test_util.h"
#include "tests/kernels/attention_mma_emulation.h"

namespace mt {
namespace {

using cudatest::Bf;
using cudatest::DeviceBuf;
using cudatest::expect_bitwise;
using cudatest::expect_close;
using cudatest::got;
using cudatest::nv;
using cudatest::rnd;

constexpr double kOut = 1.0 / 128, kGrad = 1.0 / 64, kLse = 1e-5;

struct Case {
  int B, T, H, KVH, D;
  bool docs;
  std::string str() const {
    char s[96];
    std::snprintf(s, sizeof s, "B=%d T=%d H=%d KVH=%d D=%d %s", B, T, H, KVH, D, docs ? "documents" : "one sequence");
    return s;
  }
  size_t rows() const { return size_t(B) * T; }
  size_t nqkv() const { return rows() * (H + 2 * KVH) * D; }
  size_t nout() const { return rows() * H * D; }
  size_t nlse() const { return size_t(B) * H * T; }
};

// Positions of documents of random lengths 1..90 per row, the first of length 1, and a document
// of length 1 at the last token; empty without documents (nullptr: one document per row).
std::vector<int32_t> positions(const Case& c) {
  if (!c.docs) return {};
  std::mt19937 rng(uint32_t(c.T * 31 + c.D));
  std::vector<int32_t> pos;
  for (int b = 0; b < c.B; ++b) {
    int p = 0, left = 1;
    for (int t = 0; t < c.T; ++t) {
      if (left == 0 || t == c.T - 1) p = 0, left = 1 + int(rng() % 90u);
      pos.push_back(p++);
      --left;
    }
  }
  return pos;
}

// Locators for failure messages: element i of out [B, T, H, D], lse [B, H, T], dqkv [B, T, (H + 2 KVH) D].
std::function<std::string(size_t)> at_out(const Case& c) {
  return [c](size_t i) {
    const size_t row = i / (size_t(c.H) * c.D), col = i % (size_t(c.H) * c.D);
    return "b=" + std::to_string(row / c.T) + " t=" + std::to_string(row % c.T) + " h=" + std::to_string(col / c.D) +
           " d=" + std::to_string(col % c.D);
  };
}
std::function<std::string(size_t)> at_lse(const Case& c) {
  return [c](size_t i) {
    return "b=" + std::to_string(i / (size_t(c.H) * c.T)) + " h=" + std::to_string(i / c.T % c.H) +
           " t=" + std::to_string(i % c.T);
  };
}
std::function<std::string(size_t)> at_qkv(const Case& c) {
  return [c](size_t i) {
    const size_t width = size_t(c.H + 2 * c.KVH) * c.D, row = i / width, head = i % width / c.D;
    const std::string which = head < size_t(c.H)           ? "dq h=" + std::to_string(head)
                              : head < size_t(c.H + c.KVH) ? "dk kvh=" + std::to_string(head - c.H)
                                                           : "dv kvh=" + std::to_string(head - c.H - c.KVH);
    return "b=" + std::to_string(row / c.T) + " t=" + std::to_string(row % c.T) + " " + which +
           " d=" + std::to_string(i % c.D);
  };
}

struct Inputs {
  Bf qkv, dout;
  std::vector<int32_t> pos;
  explicit Inputs(const Case& c) : qkv(rnd(c.nqkv(), 1, -2, 2)), dout(rnd(c.nout(), 2)), pos(positions(c)) {}
  const int32_t* p() const { return pos.empty() ? nullptr : pos.data(); }
};

std::vector<float> widen(const Bf& x) { return {x.d.begin(), x.d.end()}; }

// u * sum|terms| of every output (see the header), from the emulation on these inputs; the
// backward's bound on the output and lse the GPU forward stored (`fwd_out`, `fwd_lse`).
struct Slack {
  std::vector<double> out, dqkv;
};
Slack rounding_slack(const Case& c, const Inputs& in, const std::vector<float>& fwd_out,
                     const std::vector<float>& fwd_lse) {
  const attn_emulation::Problem pr{c.B, c.T, c.H, c.KVH, c.D, in.p()};
  const auto qkv = widen(in.qkv);
  const auto f = attn_emulation::forward(pr, qkv);
  const auto b = attn_emulation::backward(pr, qkv, widen(in.dout), fwd_out, fwd_lse);
  Slack s;
  for (float x : f.bound) s.out.push_back(attn_emulation::kRoundoff * x);
  for (float x : b.bound) s.dqkv.push_back(attn_emulation::kRoundoff * x);
  return s;
}

struct Outputs {
  std::vector<float> out, lse, dqkv;
  std::vector<double> out_d() const { return {out.begin(), out.end()}; }
  std::vector<double> lse_d() const { return {lse.begin(), lse.end()}; }
};

// Forward with `kernel`, then its backward on `bwd_out` / `bwd_lse` (the forward's own when null).
Outputs run(const Case& c, const Inputs& in, cuda::AttentionKernel kernel, const Outputs* bwd_from = nullptr) {
  const cudatest::AttentionKernelScope scope(kernel);
  DeviceBuf<bf16> gqkv(in.qkv.h), gdout(in.dout.h), gout(c.nout()), gdqkv(c.nqkv());
  DeviceBuf<float> glse(c.nlse());
  DeviceBuf<int32_t> gpos(in.pos);
  const int32_t* pos = in.pos.empty() ? nullptr : gpos.get();
  const auto st = cudatest::test_stream();
  Outputs o;
  const auto fwd = cuda::attention_forward(nv(gout), glse.get(), nv(gqkv), pos, c.B, c.T, c.H, c.KVH, c.D, st);
  EXPECT_TRUE(fwd.ok()) << cuda::describe(fwd);
  o.out = got(gout);
  o.lse = glse.download();
  if (bwd_from) {
    std::vector<bf16> ob(c.nout());
    for (size_t i = 0; i < ob.size(); ++i) ob[i] = float_to_bf16(bwd_from->out[i]);
    gout.upload(ob);
    glse.upload(bwd_from->lse);
  }
  const auto bwd = cuda::attention_backward(nv(gdqkv), nv(gdout), nv(gqkv), nv(gout), glse.get(), pos, c.B, c.T, c.H,
                                            c.KVH, c.D, st);
  EXPECT_TRUE(bwd.ok()) << cuda::describe(bwd);
  o.dqkv = got(gdqkv);
  return o;
}

std::vector<Case> reference_cases() {
  std::vector<Case> cases;
  for (int D : {64, 128})
    for (bool docs : {false, true}) {
      for (int T : {1, 17, 64, 333, 517})
        for (auto [H, KVH] : {std::pair{4, 2}, std::pair{8, 1}, std::pair{2, 2}}) cases.push_back({2, T, H, KVH, D, docs});
      cases.push_back({2, 2048, 4, 2, D, docs});
    }
  return cases;
}

TEST(CudaAttentionMma, MatchesCpuReference) {
  MT_REQUIRE_CUDA();
  for (const Case& c : reference_cases()) {
    SCOPED_TRACE(c.str());
    const Inputs in(c);
    const Outputs g = run(c, in, cuda::AttentionKernel::kTensorCore);
    const Slack slack = rounding_slack(c, in, g.out, g.lse);
    std::vector<double> out(c.nout()), lse(c.nlse()), dqkv(c.nqkv());
    cpu::attention_forward(out.data(), lse.data(), in.qkv.d.data(), in.p(), c.B, c.T, c.H, c.KVH, c.D);
    expect_close(g.out, out, kOut, "out", 0, at_out(c), slack.out);
    expect_close(g.lse, lse, kLse, "lse", 0, at_lse(c));
    // The backward's operands are the bf16 output the forward stored (bf16_test.cc explains why).
    const auto out_b = g.out_d();
    cpu::attention_backward(dqkv.data(), in.dout.d.data(), in.qkv.d.data(), out_b.data(), lse.data(), in.p(), c.B, c.T,
                            c.H, c.KVH, c.D);
    expect_close(g.dqkv, dqkv, kGrad, "dqkv", 0, at_qkv(c), slack.dqkv);
    if (HasFailure()) break;  // the first failing shape, fully described, is enough
  }
}

TEST(CudaAttentionMma, MatchesSimtKernel) {
  MT_REQUIRE_CUDA();
  for (int D : {64, 128})
    for (bool docs : {false, true})
      for (const Case c : {Case{2, 333, 4, 2, D, docs}, Case{2, 517, 8, 1, D, docs}}) {
        SCOPED_TRACE(c.str());
        const Inputs in(c);
        const Outputs simt = run(c, in, cuda::AttentionKernel::kSimt);
        const Outputs mma = run(c, in, cuda::AttentionKernel::kTensorCore, &simt);  // backward on the same inputs
        const Slack slack = rounding_slack(c, in, simt.out, simt.lse);  // simt rounds only its outputs
        expect_close(mma.out, simt.out_d(), kOut, "out vs simt", 0, at_out(c), slack.out);
        expect_close(mma.lse, simt.lse_d(), kLse, "lse vs simt", 0, at_lse(c));
        expect_close(mma.dqkv, {simt.dqkv.begin(), simt.dqkv.end()}, kGrad, "dqkv vs simt", 0, at_qkv(c), slack.dqkv);
        // P is rounded to bf16 only by the tensor-core kernel: identical outputs would mean the
        // selection did not switch kernels.
        EXPECT_NE(mma.out, simt.out) << "kTensorCore and kSimt gave bit-identical outputs";
        if (HasFailure()) return;
      }
}

TEST(CudaAttentionMma, BitReproducible) {
  MT_REQUIRE_CUDA();
  for (const Case c : {Case{2, 517, 8, 1, 128, true}, Case{2, 333, 4, 2, 64, false}}) {
    SCOPED_TRACE(c.str());
    const Inputs in(c);
    const Outputs a = run(c, in, cuda::AttentionKernel::kTensorCore);
    const Outputs b = run(c, in, cuda::AttentionKernel::kTensorCore);
    expect_bitwise(a.out, b.out, "out");
    expect_bitwise(a.lse, b.lse, "lse");
    expect_bitwise(a.dqkv, b.dqkv, "dqkv");
  }
}

}  // namespace
}  // namespace mt

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
#include "tests/cuda/attention_cases.h"
#include "tests/cuda/cuda_test_util.h"

namespace mt {
namespace {

using cudatest::Bf;
using cudatest::DeviceBuf;
using cudatest::expect_bitwise;
using cudatest::expect_close;
using cudatest::got;
using cudatest::nv;
using cudatest::rnd;

using namespace attn_cases;

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
        for (auto [H, KVH] : {std::pair{4, 2}, std::pair{8, 1}, std::pair{2, 2}})
          if (!cudatest::emulated() || T < 333 || H == 4) cases.push_back({2, T, H, KVH, D, docs});
      if (!cudatest::emulated()) cases.push_back({2, 2048, 4, 2, D, docs});  // 517 tiles alike
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
        if (cudatest::emulated() && (D == 128) != docs) continue;  // each D and each layout once
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

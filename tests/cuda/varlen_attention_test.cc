// Packed documents on CUDA: attention (forward and backward) and RoPE with per-token document
// positions against the CPU reference in double with the same positions (which itself equals
// each document run alone: tests/engine/backend/varlen_ops_test.cc). Rows hold documents of
// length 1 (also at the last token) and documents crossing the kernels' 32-key and 8/16-row
// tiles. fp32 tolerances as tests/cuda/attention_test.cc: 2e-5 forward, 5e-5 backward relative
// to max(|ref|, rms(ref)); RoPE 1e-5. Skips without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/attention.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/rope.h"
#include "tests/cuda/cuda_test_util.h"

namespace mt {
namespace {

using cudatest::DeviceBuf;
using cudatest::expect_close;
using cudatest::random_floats;
using cudatest::to_double;

struct Shape {
  int B, T, H, KVH, D;
};

// Positions of B rows of T tokens cut into documents of random lengths 1..max_len, with a
// document of length 1 at each row's last token.
std::vector<int32_t> packed_positions(int B, int T, int max_len, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> pos;
  for (int b = 0; b < B; ++b) {
    int p = 0, left = 1 + int(rng() % uint32_t(max_len));
    for (int t = 0; t < T; ++t) {
      if (t == T - 1 || left == 0) {
        p = 0;
        left = 1 + int(rng() % uint32_t(max_len));
      }
      pos.push_back(p++);
      --left;
    }
  }
  return pos;
}

TEST(VarlenCudaAttention, ForwardBackwardMatchCpuWithDocuments) {
  MT_REQUIRE_CUDA();
  for (const Shape s : {Shape{2, 150, 4, 2, 20}, Shape{1, 333, 4, 2, 64}, Shape{3, 97, 8, 1, 128}}) {
    SCOPED_TRACE(testing::Message() << "B=" << s.B << " T=" << s.T << " D=" << s.D);
    const size_t rows = size_t(s.B) * s.T, nqkv = rows * (s.H + 2 * s.KVH) * s.D, nout = rows * s.H * s.D;
    const size_t nlse = size_t(s.B) * s.H * s.T;
    const auto pos = packed_positions(s.B, s.T, 70, uint32_t(s.T));
    auto qkv = random_floats(nqkv, 21, -2, 2), dout = random_floats(nout, 22);
    auto qd = to_double(qkv), dod = to_double(dout);
    std::vector<double> out(nout), lse(nlse), dqkv(nqkv);
    cpu::attention_forward(out.data(), lse.data(), qd.data(), pos.data(), s.B, s.T, s.H, s.KVH, s.D);
    cpu::attention_backward(dqkv.data(), dod.data(), qd.data(), out.data(), lse.data(), pos.data(), s.B, s.T, s.H,
                            s.KVH, s.D);
    DeviceBuf<float> gqkv(qkv), gdout(dout), gout(nout), glse(nlse), gdqkv(nqkv);
    DeviceBuf<int32_t> gpos(pos);
    const auto st = cudatest::test_stream();
    MT_EXPECT_CUDA_OK(
        cuda::attention_forward(gout.get(), glse.get(), gqkv.get(), gpos.get(), s.B, s.T, s.H, s.KVH, s.D, st));
    MT_EXPECT_CUDA_OK(cuda::attention_backward(gdqkv.get(), gdout.get(), gqkv.get(), gout.get(), glse.get(), gpos.get(),
                                               s.B, s.T, s.H, s.KVH, s.D, st));
    expect_close(gout.download(), out, 2e-5, "out");
    expect_close(glse.download(), lse, 1e-5, "lse");
    expect_close(gdqkv.download(), dqkv, 5e-5, "dqkv");
  }
}

TEST(VarlenCudaRope, PositionsAndScaleMatchCpu) {
  MT_REQUIRE_CUDA();
  const Shape s{2, 150, 4, 2, 64};
  const size_t n = size_t(s.B) * s.T * (s.H + 2 * s.KVH) * s.D;
  std::vector<float> inv(size_t(s.D / 2));
  for (int i = 0; i < s.D / 2; ++i) inv[size_t(i)] = float(std::pow(10000.0, -2.0 * i / s.D));
  const auto pos = packed_positions(s.B, s.T, 40, 3);
  const auto q = random_floats(n, 9);
  for (int dir = 0; dir < 2; ++dir) {
    std::vector<double> ref = to_double(q);
    const float scale = 1.1386294f;
    if (dir == 0) cpu::rope_forward(ref.data(), inv.data(), pos.data(), s.B, s.T, s.H, s.KVH, s.D, scale);
    else cpu::rope_backward(ref.data(), inv.data(), pos.data(), s.B, s.T, s.H, s.KVH, s.D, scale);
    DeviceBuf<float> g(q), ginv(inv);
    DeviceBuf<int32_t> gpos(pos);
    const auto st = cudatest::test_stream();
    if (dir == 0)
      MT_EXPECT_CUDA_OK(cuda::rope_forward(g.get(), ginv.get(), gpos.get(), s.B, s.T, s.H, s.KVH, s.D, scale, st));
    else
      MT_EXPECT_CUDA_OK(cuda::rope_backward(g.get(), ginv.get(), gpos.get(), s.B, s.T, s.H, s.KVH, s.D, scale, st));
    expect_close(g.download(), ref, 1e-5, dir == 0 ? "rope forward" : "rope backward");
  }
}

}  // namespace
}  // namespace mt

// CUDA causal GQA attention against the CPU reference in double, at odd lengths and head dims
// (including D not a multiple of 32 and D = 256), and bit-reproducibility of the backward.
// fp32 tolerance: forward 1e-5, backward 2e-5 relative to max(|ref|, rms(ref)) (fp32 softmax
// and fp32 sums over up to T keys/queries).
#include <gtest/gtest.h>

#include "kernels/attention.h"
#include "kernels/cuda/attention.cuh"
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
const Shape kShapes[] = {{1, 1, 1, 1, 8},    {2, 37, 4, 2, 16},  {1, 70, 6, 2, 40}, {1, 129, 2, 1, 128},
                         {1, 50, 4, 4, 256}, {3, 33, 8, 1, 64}, {1, 300, 2, 2, 96}};

// Forward and backward of one shape on the device against the CPU reference in double, with
// the given tolerances (relative to max(|ref|, rms(ref))) and random seeds.
void expect_attention_matches_cpu(const Shape s, double tol_out, double tol_dqkv, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "B=" << s.B << " T=" << s.T << " H=" << s.H << " KVH=" << s.KVH << " D=" << s.D);
  const size_t rows = size_t(s.B) * s.T, nqkv = rows * (s.H + 2 * s.KVH) * s.D, nout = rows * s.H * s.D;
  const size_t nlse = size_t(s.B) * s.H * s.T;
  auto qkv = random_floats(nqkv, seed, -2, 2), dout = random_floats(nout, seed + 1);
  auto qd = to_double(qkv), dod = to_double(dout);
  std::vector<double> out(nout), lse(nlse), dqkv(nqkv);
  cpu::attention_forward(out.data(), lse.data(), qd.data(), nullptr, s.B, s.T, s.H, s.KVH, s.D);
  cpu::attention_backward(dqkv.data(), dod.data(), qd.data(), out.data(), lse.data(), nullptr, s.B, s.T, s.H, s.KVH, s.D);
  DeviceBuf<float> gqkv(qkv), gdout(dout), gout(nout), glse(nlse), gdqkv(nqkv);
  const auto st = cudatest::test_stream();
  MT_EXPECT_CUDA_OK(cuda::attention_forward(gout.get(), glse.get(), gqkv.get(), nullptr, s.B, s.T, s.H, s.KVH, s.D, st));
  MT_EXPECT_CUDA_OK(cuda::attention_backward(gdqkv.get(), gdout.get(), gqkv.get(), gout.get(), glse.get(), nullptr, s.B, s.T,
                                             s.H, s.KVH, s.D, st));
  expect_close(gout.download(), out, tol_out, "out");
  expect_close(glse.download(), lse, 1e-5, "lse");
  expect_close(gdqkv.download(), dqkv, tol_dqkv, "dqkv");
}

TEST(CudaAttention, ForwardBackwardMatchCpu) {
  MT_REQUIRE_CUDA();
  for (const Shape s : kShapes) expect_attention_matches_cpu(s, 1e-5, 2e-5, 1);
}

// Above 300 tokens (issue 18 point 9): many key tiles per query block, the online softmax
// rescaling across them, and a partial last tile. fp32 sums over up to T = 1029 keys / queries:
// 2e-5 forward, 5e-5 backward.
TEST(CudaAttention, LongSequencesMatchCpu) {
  MT_REQUIRE_CUDA();
  for (const Shape s : {Shape{1, 333, 4, 2, 64}, Shape{1, 1029, 2, 1, 32}, Shape{2, 517, 2, 2, 128}})
    expect_attention_matches_cpu(s, 2e-5, 5e-5, 5);
}

TEST(CudaAttention, BackwardIsBitReproducible) {
  MT_REQUIRE_CUDA();
  const Shape s{2, 200, 8, 2, 64};
  const size_t rows = size_t(s.B) * s.T, nqkv = rows * (s.H + 2 * s.KVH) * s.D, nout = rows * s.H * s.D;
  DeviceBuf<float> gqkv(random_floats(nqkv, 3)), gdout(random_floats(nout, 4)), gout(nout),
      glse(size_t(s.B) * s.H * s.T);
  const auto st = cudatest::test_stream();
  MT_EXPECT_CUDA_OK(cuda::attention_forward(gout.get(), glse.get(), gqkv.get(), nullptr, s.B, s.T, s.H, s.KVH, s.D, st));
  std::vector<float> first;
  for (int rep = 0; rep < 2; ++rep) {
    DeviceBuf<float> gdqkv(nqkv);
    MT_EXPECT_CUDA_OK(cuda::attention_backward(gdqkv.get(), gdout.get(), gqkv.get(), gout.get(), glse.get(), nullptr, s.B, s.T,
                                               s.H, s.KVH, s.D, st));
    if (rep == 0) first = gdqkv.download();
    else cudatest::expect_bitwise(first, gdqkv.download(), "dqkv twice");
  }
}

TEST(CudaAttention, RefusesHeadDimAbove256) {
  MT_REQUIRE_CUDA();
  DeviceBuf<float> q(size_t(3) * 320), o(320), l(1);
  const cuda::CudaStatus s = cuda::attention_forward(o.get(), l.get(), q.get(), nullptr, 1, 1, 1, 1, 320, cudatest::test_stream());
  EXPECT_FALSE(s.ok());
}

}  // namespace
}  // namespace mt

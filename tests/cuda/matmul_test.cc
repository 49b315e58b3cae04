// CUDA GEMM (cuBLASLt), dense layers and the fused LM head + cross-entropy against the CPU
// reference in double. fp32 tolerance 2e-5 relative to max(|ref|, rms(ref)): strict fp32
// (no TF32) with fp32 accumulation over K <= ~1000 terms of unit scale.
#include <gtest/gtest.h>

#include "kernels/cuda/lm_head_loss.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/lm_head_loss.h"
#include "kernels/matmul.h"
#include "tests/cuda/cuda_test_util.h"

namespace mt {
namespace {

using cudatest::DeviceBuf;
using cudatest::expect_close;
using cudatest::random_floats;
using cudatest::to_double;

std::unique_ptr<cuda::GemmContext> make_ctx() {
  std::unique_ptr<cuda::GemmContext> c;
  const cuda::CudaStatus s = cuda::GemmContext::create(c);
  EXPECT_TRUE(s.ok()) << cuda::describe(s);
  return c;
}

struct Mm {
  int N, C, OC;
};
const Mm kMm[] = {{1, 1, 1}, {7, 13, 5}, {33, 65, 17}, {128, 96, 200}, {257, 511, 129}};

TEST(CudaMatmul, ForwardBackwardMatchCpu) {
  MT_REQUIRE_CUDA();
  auto ctx = make_ctx();
  ASSERT_TRUE(ctx);
  for (const Mm s : kMm)
    for (bool bias : {false, true}) {
      SCOPED_TRACE(testing::Message() << "N=" << s.N << " C=" << s.C << " OC=" << s.OC << " bias=" << bias);
      const size_t ni = size_t(s.N) * s.C, nw = size_t(s.OC) * s.C, no = size_t(s.N) * s.OC;
      auto x = random_floats(ni, 1), w = random_floats(nw, 2), b = random_floats(size_t(s.OC), 3);
      auto dy = random_floats(no, 4), dx0 = random_floats(ni, 5), dw0 = random_floats(nw, 6);
      auto db0 = random_floats(size_t(s.OC), 7);
      auto xd = to_double(x), wd = to_double(w), bd = to_double(b), dyd = to_double(dy);
      std::vector<double> out(no), dx = to_double(dx0), dw = to_double(dw0), db = to_double(db0);
      cpu::matmul_forward(out.data(), xd.data(), wd.data(), bias ? bd.data() : nullptr, s.N, s.C, s.OC);
      cpu::matmul_backward(dx.data(), dw.data(), bias ? db.data() : nullptr, dyd.data(), xd.data(), wd.data(), s.N, s.C,
                           s.OC);
      DeviceBuf<float> gx(x), gw(w), gb(b), gdy(dy), gout(no), gdx(dx0), gdw(dw0), gdb(db0);
      const auto st = cudatest::test_stream();
      MT_EXPECT_CUDA_OK(cuda::matmul_forward(gout.get(), gx.get(), gw.get(), bias ? gb.get() : nullptr, s.N, s.C, s.OC,
                                             *ctx, st));
      MT_EXPECT_CUDA_OK(cuda::matmul_backward(gdx.get(), gdw.get(), bias ? gdb.get() : nullptr, gdy.get(), gx.get(),
                                              gw.get(), s.N, s.C, s.OC, *ctx, st));
      expect_close(gout.download(), out, 2e-5, "out");
      expect_close(gdx.download(), dx, 2e-5, "dinp");
      expect_close(gdw.download(), dw, 2e-5, "dweight");
      if (bias) expect_close(gdb.download(), db, 2e-5, "dbias");
    }
}

TEST(CudaGemm, TransposesAndLeadingDimensions) {
  MT_REQUIRE_CUDA();
  auto ctx = make_ctx();
  ASSERT_TRUE(ctx);
  const int M = 19, N = 23, K = 31, pad = 3;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(testing::Message() << "ta=" << ta << " tb=" << tb);
      const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
      auto a = random_floats(size_t(ta ? K : M) * lda, 1), b = random_floats(size_t(tb ? N : K) * ldb, 2);
      auto c0 = random_floats(size_t(M) * ldc, 3);
      auto ad = to_double(a), bd = to_double(b);
      std::vector<double> c = to_double(c0);
      cpu::gemm(ta, tb, M, N, K, 0.5, ad.data(), lda, bd.data(), ldb, -1.5, c.data(), ldc);
      DeviceBuf<float> ga(a), gb(b), gc(c0);
      MT_EXPECT_CUDA_OK(cuda::gemm<float>(ta, tb, M, N, K, 0.5f, ga.get(), lda, gb.get(), ldb, -1.5f, gc.get(), ldc, *ctx,
                                          cudatest::test_stream()));
      expect_close(gc.download(), c, 2e-5, "C");
    }
}

// bf16 storage, fp32 accumulation: inputs are exactly representable (rounded to bf16 first),
// so the only error is the final rounding of C to bf16, half an ulp = 2^-9 relative; 2^-7
// leaves room for the fp32 accumulation order.
TEST(CudaGemm, Bf16StorageFp32Accumulate) {
  MT_REQUIRE_CUDA();
  auto ctx = make_ctx();
  ASSERT_TRUE(ctx);
  const int M = 65, N = 129, K = 257;
  auto a = random_floats(size_t(M) * K, 1), b = random_floats(size_t(N) * K, 2);
  std::vector<bf16> ah(a.size()), bh(b.size());
  std::vector<double> ad(a.size()), bd(b.size()), c(size_t(M) * N);
  for (size_t i = 0; i < a.size(); ++i) ah[i] = float_to_bf16(a[i]), ad[i] = bf16_to_float(ah[i]);
  for (size_t i = 0; i < b.size(); ++i) bh[i] = float_to_bf16(b[i]), bd[i] = bf16_to_float(bh[i]);
  cpu::gemm(false, true, M, N, K, 1.0, ad.data(), K, bd.data(), K, 0.0, c.data(), N);
  DeviceBuf<bf16> ga(ah), gb(bh), gc(size_t(M) * N);
  MT_EXPECT_CUDA_OK(cuda::gemm<__nv_bfloat16>(false, true, M, N, K, 1.f, reinterpret_cast<const __nv_bfloat16*>(ga.get()),
                                              K, reinterpret_cast<const __nv_bfloat16*>(gb.get()), K, 0.f,
                                              reinterpret_cast<__nv_bfloat16*>(gc.get()), N, *ctx,
                                              cudatest::test_stream()));
  const auto ch = gc.download();
  std::vector<float> cf(ch.size());
  for (size_t i = 0; i < ch.size(); ++i) cf[i] = bf16_to_float(ch[i]);
  expect_close(cf, c, 1.0 / 128, "bf16 C");
}

TEST(CudaLmHeadLoss, MatchesCpuWithIgnoredTargets) {
  MT_REQUIRE_CUDA();
  auto ctx = make_ctx();
  ASSERT_TRUE(ctx);
  struct S {
    int N, C, V, chunk;
  };
  for (const S s : {S{1, 4, 3, 1}, S{37, 24, 101, 16}, S{200, 64, 1001, 64}, S{65, 33, 5000, 1000}}) {
    SCOPED_TRACE(testing::Message() << "N=" << s.N << " C=" << s.C << " V=" << s.V << " chunk=" << s.chunk);
    auto x = random_floats(size_t(s.N) * s.C, 1), W = random_floats(size_t(s.V) * s.C, 2);
    auto dW0 = random_floats(size_t(s.V) * s.C, 3);
    std::vector<int32_t> tg(size_t(s.N));
    for (int i = 0; i < s.N; ++i) tg[size_t(i)] = (i % 7 == 3) ? -1 : int32_t((i * 7919) % s.V);
    auto xd = to_double(x), Wd = to_double(W);
    std::vector<double> dx(x.size()), dW = to_double(dW0), losses(size_t(s.N)), scratch(size_t(s.chunk) * s.V);
    const double gs = 1.0 / s.N;
    auto ref = cpu::lm_head_loss(dx.data(), dW.data(), losses.data(), xd.data(), Wd.data(), tg.data(), s.N, s.C, s.V,
                                 s.chunk, gs, scratch.data());
    DeviceBuf<float> gx(x), gW(W), gdx(x.size()), gdW(dW0), glosses(size_t(s.N)), gscr(size_t(s.chunk) * s.V);
    DeviceBuf<int32_t> gtg(tg);
    DeviceBuf<double> rows(size_t(s.N)), totals(2);
    MT_EXPECT_CUDA_OK(cuda::lm_head_loss(gdx.get(), gdW.get(), glosses.get(), gx.get(), gW.get(), gtg.get(), s.N, s.C,
                                         s.V, s.chunk, float(gs), gscr.get(), rows.get(), totals.get(), *ctx,
                                         cudatest::test_stream()));
    const auto t = totals.download();
    EXPECT_EQ(long(t[1]), ref.counted);
    EXPECT_NEAR(t[0], ref.loss_sum, 1e-5 * std::fabs(ref.loss_sum) + 1e-6) << "loss sum";
    expect_close(glosses.download(), losses, 2e-5, "per-token losses");
    expect_close(gdx.download(), dx, 2e-5, "dx");
    expect_close(gdW.download(), dW, 2e-5, "dW");
  }
}

}  // namespace
}  // namespace mt

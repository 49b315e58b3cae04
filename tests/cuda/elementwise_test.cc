// CUDA RMSNorm, RoPE, SwiGLU, embedding, utilities and AdamW against the CPU reference (in
// double unless stated) at random shapes, odd sizes included. fp32 tolerance: 1e-5 relative
// to max(|ref|, rms(ref)) — each output is a short fp32 computation (a row reduction at most).
#include <gtest/gtest.h>

#include "kernels/adamw.h"
#include "kernels/cuda/adamw.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/swiglu.cuh"
#include "kernels/cuda/util.cuh"
#include "kernels/embedding.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "tests/cuda/cuda_test_util.h"

namespace mt {
namespace {

using cudatest::DeviceBuf;
using cudatest::expect_close;
using cudatest::random_floats;
using cudatest::to_double;

struct NC {
  int N, C;
};
const NC kShapes[] = {{1, 1}, {3, 7}, {17, 33}, {64, 96}, {129, 257}, {300, 1000}};

TEST(CudaRmsnorm, ForwardBackwardMatchCpu) {
  MT_REQUIRE_CUDA();
  for (const NC s : kShapes) {
    SCOPED_TRACE(testing::Message() << "N=" << s.N << " C=" << s.C);
    const size_t n = size_t(s.N) * s.C;
    auto x = random_floats(n, 1), w = random_floats(size_t(s.C), 2, 0.5, 1.5), dy = random_floats(n, 3);
    auto dx0 = random_floats(n, 4), dw0 = random_floats(size_t(s.C), 5);  // backward accumulates
    std::vector<double> out(n), rstd(size_t(s.N)), dx = to_double(dx0), dw = to_double(dw0);
    auto xd = to_double(x), wd = to_double(w), dyd = to_double(dy);
    cpu::rmsnorm_forward(out.data(), rstd.data(), xd.data(), wd.data(), s.N, s.C, 1e-5f);
    cpu::rmsnorm_backward(dx.data(), dw.data(), dyd.data(), xd.data(), wd.data(), rstd.data(), s.N, s.C);
    DeviceBuf<float> gx(x), gw(w), gdy(dy), gout(n), grstd(size_t(s.N)), gdx(dx0), gdw(dw0);
    DeviceBuf<float> scratch(cuda::rmsnorm_backward_scratch(s.N, s.C));
    const cudaStream_t st = cudatest::test_stream();
    MT_EXPECT_CUDA_OK(cuda::rmsnorm_forward(gout.get(), grstd.get(), gx.get(), gw.get(), s.N, s.C, 1e-5f, st));
    MT_EXPECT_CUDA_OK(cuda::rmsnorm_backward(gdx.get(), gdw.get(), gdy.get(), gx.get(), gw.get(), grstd.get(), s.N,
                                             s.C, scratch.get(), st));
    expect_close(gout.download(), out, 1e-5, "out");
    expect_close(grstd.download(), rstd, 1e-5, "rstd");
    expect_close(gdx.download(), dx, 1e-5, "dinp");
    // dweight sums N rows in fp32: 1e-5 * (1 + N / 1000) relative.
    expect_close(gdw.download(), dw, 1e-5 * (1 + s.N / 1000.0), "dweight");
  }
}

TEST(CudaRmsnorm, BackwardIsDeterministic) {
  MT_REQUIRE_CUDA();
  const int N = 4099, C = 130;
  auto x = random_floats(size_t(N) * C, 1), dy = random_floats(size_t(N) * C, 2), w = random_floats(C, 3);
  DeviceBuf<float> gx(x), gdy(dy), gw(w), grstd{size_t(N)}, gout(size_t(N) * C), scratch(cuda::rmsnorm_backward_scratch(N, C));
  const cudaStream_t st = cudatest::test_stream();
  MT_EXPECT_CUDA_OK(cuda::rmsnorm_forward(gout.get(), grstd.get(), gx.get(), gw.get(), N, C, 1e-6f, st));
  std::vector<float> first;
  for (int rep = 0; rep < 2; ++rep) {
    DeviceBuf<float> gdw{std::vector<float>(size_t(C), 0.f)};
    MT_EXPECT_CUDA_OK(cuda::rmsnorm_backward<float>(nullptr, gdw.get(), gdy.get(), gx.get(), gw.get(), grstd.get(), N, C,
                                                    scratch.get(), st));
    if (rep == 0) first = gdw.download();
    else cudatest::expect_bitwise(first, gdw.download(), "dweight twice");
  }
}

struct RopeShape {
  int B, T, H, KVH, D;
};

TEST(CudaRope, ForwardBackwardMatchCpu) {
  MT_REQUIRE_CUDA();
  for (const RopeShape s : {RopeShape{1, 1, 1, 1, 2}, RopeShape{2, 13, 4, 2, 6}, RopeShape{3, 77, 6, 3, 64},
                            RopeShape{1, 300, 2, 1, 128}}) {
    SCOPED_TRACE(testing::Message() << "B=" << s.B << " T=" << s.T << " D=" << s.D);
    const size_t n = size_t(s.B) * s.T * (s.H + 2 * s.KVH) * s.D;
    std::vector<float> inv(size_t(s.D / 2));
    for (int i = 0; i < s.D / 2; ++i) inv[size_t(i)] = float(std::pow(10000.0, -2.0 * i / s.D));
    auto q = random_floats(n, 7);
    for (int dir = 0; dir < 2; ++dir) {
      std::vector<double> ref = to_double(q);
      if (dir == 0) cpu::rope_forward(ref.data(), inv.data(), nullptr, s.B, s.T, s.H, s.KVH, s.D, 1.f);
      else cpu::rope_backward(ref.data(), inv.data(), nullptr, s.B, s.T, s.H, s.KVH, s.D, 1.f);
      DeviceBuf<float> g(q), ginv(inv);
      const auto st = cudatest::test_stream();
      if (dir == 0) MT_EXPECT_CUDA_OK(cuda::rope_forward(g.get(), ginv.get(), nullptr, s.B, s.T, s.H, s.KVH, s.D, 1.f, st));
      else MT_EXPECT_CUDA_OK(cuda::rope_backward(g.get(), ginv.get(), nullptr, s.B, s.T, s.H, s.KVH, s.D, 1.f, st));
      expect_close(g.download(), ref, 1e-5, dir == 0 ? "rope forward" : "rope backward");
    }
  }
}

TEST(CudaSwiglu, ForwardBackwardMatchCpu) {
  MT_REQUIRE_CUDA();
  for (const NC s : kShapes) {
    SCOPED_TRACE(testing::Message() << "N=" << s.N << " F=" << s.C);
    const size_t n = size_t(s.N) * s.C;
    auto gu = random_floats(2 * n, 11, -4, 4), dy = random_floats(n, 12);
    std::vector<double> out(n), dgu(2 * n);
    auto gud = to_double(gu), dyd = to_double(dy);
    cpu::swiglu_forward(out.data(), gud.data(), s.N, s.C);
    cpu::swiglu_backward(dgu.data(), dyd.data(), gud.data(), s.N, s.C);
    DeviceBuf<float> ggu(gu), gdy(dy), gout(n), gdgu(2 * n);
    MT_EXPECT_CUDA_OK(cuda::swiglu_forward(gout.get(), ggu.get(), s.N, s.C, cudatest::test_stream()));
    MT_EXPECT_CUDA_OK(cuda::swiglu_backward(gdgu.get(), gdy.get(), ggu.get(), s.N, s.C, cudatest::test_stream()));
    expect_close(gout.download(), out, 1e-5, "swiglu out");
    expect_close(gdgu.download(), dgu, 1e-5, "swiglu dgu");
  }
}

TEST(CudaEmbedding, ForwardExactBackwardBitIdenticalToCpuFloat) {
  MT_REQUIRE_CUDA();
  for (const NC s : {NC{1, 1}, NC{37, 19}, NC{1000, 130}, NC{5000, 64}}) {
    SCOPED_TRACE(testing::Message() << "N=" << s.N << " C=" << s.C);
    const int V = 97;
    std::mt19937 rng(5);
    std::vector<int32_t> tok(size_t(s.N));
    for (auto& t : tok) t = int32_t(rng() % 13 == 0 ? 7 : rng() % V);  // many repeats of token 7
    auto wte = random_floats(size_t(V) * s.C, 1), dout = random_floats(size_t(s.N) * s.C, 2);
    auto dwte0 = random_floats(size_t(V) * s.C, 3);
    std::vector<float> out(size_t(s.N) * s.C), dwte = dwte0;
    cpu::embedding_forward(out.data(), tok.data(), wte.data(), s.N, s.C);
    cpu::embedding_backward(dwte.data(), dout.data(), tok.data(), s.N, s.C);
    DeviceBuf<int32_t> gtok(tok);
    DeviceBuf<float> gwte(wte), gdout(dout), gout(out.size()), gdwte(dwte0);
    MT_EXPECT_CUDA_OK(cuda::embedding_forward(gout.get(), gtok.get(), gwte.get(), s.N, s.C, cudatest::test_stream()));
    MT_EXPECT_CUDA_OK(cuda::embedding_backward(gdwte.get(), gdout.get(), gtok.get(), s.N, s.C, cudatest::test_stream()));
    // Same additions in the same (token) order as the CPU: bit-identical.
    cudatest::expect_bitwise(gout.download(), out, "embedding forward");
    cudatest::expect_bitwise(gdwte.download(), dwte, "embedding backward");
  }
}

TEST(CudaUtil, AddCopyZeroConvert) {
  MT_REQUIRE_CUDA();
  const size_t n = 100003;
  auto a = random_floats(n, 1, -1e3, 1e3), b = random_floats(n, 2);
  std::vector<float> sum(n);
  for (size_t i = 0; i < n; ++i) sum[i] = a[i] + b[i];
  DeviceBuf<float> ga(a), gb(b), gc(n), gz(n);
  DeviceBuf<uint16_t> gh(n);
  const auto st = cudatest::test_stream();
  MT_EXPECT_CUDA_OK(cuda::add_inplace(ga.get(), gb.get(), n, st));
  MT_EXPECT_CUDA_OK(cuda::copy_bytes(gc.get(), ga.get(), n * sizeof(float), st));
  MT_EXPECT_CUDA_OK(cuda::zero_bytes(gz.get(), n * sizeof(float), st));
  MT_EXPECT_CUDA_OK(cuda::convert_f32_to_bf16(reinterpret_cast<__nv_bfloat16*>(gh.get()), gc.get(), n, st));
  cudatest::expect_bitwise(gc.download(), sum, "add + copy");
  cudatest::expect_bitwise(gz.download(), std::vector<float>(n, 0.f), "zero");
  const auto h = gh.download();
  int bad = 0;
  for (size_t i = 0; i < n; ++i) bad += h[i] != float_to_bf16(sum[i]).bits;
  EXPECT_EQ(bad, 0) << "fp32 -> bf16 must round to nearest even exactly as mt::float_to_bf16";
}

template <typename S>
void adamw_case(bool shadow) {
  const size_t n = 70001;
  auto p0 = random_floats(n, 1), g = random_floats(n, 2, -0.1, 0.1), m = random_floats(n, 3, -0.01, 0.01);
  auto v = random_floats(n, 4, 0, 1e-4);
  std::vector<S> gs(n), ms(n), vs(n);
  for (size_t i = 0; i < n; ++i) gs[i] = from_float<S>(g[i]), ms[i] = from_float<S>(m[i]), vs[i] = from_float<S>(v[i]);
  cpu::AdamWParams prm{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, 3};
  std::vector<float> p = p0;
  std::vector<S> mc = ms, vc = vs;
  std::vector<bf16> sh(n);
  cpu::adamw_update<S>(p.data(), gs.data(), mc.data(), vc.data(), shadow ? sh.data() : nullptr, n, prm);
  using D = std::conditional_t<std::is_same_v<S, float>, float, __nv_bfloat16>;
  DeviceBuf<float> gp(p0);
  DeviceBuf<S> gg(gs), gm(ms), gv(vs);
  DeviceBuf<bf16> gsh(n);
  MT_EXPECT_CUDA_OK(cuda::adamw_update<D>(gp.get(), reinterpret_cast<const D*>(gg.get()), reinterpret_cast<D*>(gm.get()),
                                          reinterpret_cast<D*>(gv.get()),
                                          shadow ? reinterpret_cast<__nv_bfloat16*>(gsh.get()) : nullptr, n, prm,
                                          cudatest::test_stream()));
  // fp32: the same formula, FMA contraction aside: 1e-6 relative on the parameter.
  expect_close(gp.download(), to_double(p), 1e-6, "param");
  auto as_f = [](const std::vector<S>& x) {
    std::vector<double> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = to_float(x[i]);
    return r;
  };
  auto dl = [&](const DeviceBuf<S>& b) {
    auto x = b.download();
    std::vector<float> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = to_float(x[i]);
    return r;
  };
  // bf16 moments: one rounding of the same fp32 value, so at most one bf16 ulp (2^-7 relative).
  const double mtol = std::is_same_v<S, float> ? 1e-6 : 1.0 / 128;
  expect_close(dl(gm), as_f(mc), mtol, "m");
  expect_close(dl(gv), as_f(vc), mtol, "v");
  if (shadow) {
    auto s = gsh.download();
    int off = 0;
    for (size_t i = 0; i < n; ++i) off += std::abs(int(s[i].bits) - int(sh[i].bits)) > 1;
    EXPECT_EQ(off, 0) << "shadow within one bf16 ulp of the CPU's";
  }
}

TEST(CudaAdamw, Fp32MatchesCpu) {
  MT_REQUIRE_CUDA();
  adamw_case<float>(false);
  adamw_case<float>(true);
}

TEST(CudaAdamw, Bf16MomentsMatchCpu) {
  MT_REQUIRE_CUDA();
  adamw_case<bf16>(true);
}

}  // namespace
}  // namespace mt

// The mixture-of-experts ops of the CUDA bf16 table against the CPU bf16 table (the reference),
// on identical inputs, as bf16_ops_test.cc does for the dense ops: the router's choice (exact:
// logits are multiples of 1/16, so two experts tie exactly or differ by 6%), its weights and
// statistics (fp32 sum-order noise), the permutation and the gather (exact), the weighted
// scatter (one rounding of one fused multiply-add per element on both sides: bit-identical), the
// scatter's backward (dw fp32, dh and dy one rounding each), the router's backward (bf16, ulp
// flips), and Qwen2-MoE's sigmoid gate. Skips without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/moe.h"
#include "tests/cuda/bf16_ops_util.h"
#include "tests/cuda/cuda_test_util.h"

namespace mt {
namespace {

using cudatest::DeviceBuf;
using namespace bf16test;

// Logits on a grid of 1/16 in [-2, 2]: exact in bf16.
std::vector<bf16> router_logits16(size_t n, uint32_t seed) {
  const auto f = cudatest::random_floats(n, seed, -2, 2);
  std::vector<bf16> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = float_to_bf16(std::round(f[i] * 16) / 16);
  return b;
}

template <typename V>
std::vector<V> download(const DeviceBuf<V>& b) {
  return b.download();
}

TEST_F(CudaBf16Ops, MoeRouterSortGatherScatterMatchTheCpuTable) {
  for (const RouterKind kind : {RouterKind::kSoftmaxTopK, RouterKind::kTopKSoftmax}) {
    SCOPED_TRACE(kind == RouterKind::kSoftmaxTopK ? "softmax, top k, renormalised" : "top k, softmax");
    RouterShape s;
    s.N = 53, s.E = 8, s.k = 2, s.kind = kind, s.renormalize = kind == RouterKind::kSoftmaxTopK;
    const int C = 72, n = s.N * s.k;
    const auto logits = router_logits16(size_t(s.N) * s.E, 21);
    std::vector<int32_t> idx(static_cast<size_t>(n)), rows(static_cast<size_t>(n)), offsets(size_t(s.E) + 1);
    std::vector<float> w(static_cast<size_t>(n)), stats(2 * size_t(s.E), 0.f);
    cpu().moe_route_forward(idx.data(), w.data(), stats.data(), logits.data(), s);
    cpu().moe_sort(rows.data(), offsets.data(), idx.data(), s.N, s.E, s.k);
    const auto x = rnd16(size_t(s.N) * C, 22), y = rnd16(size_t(n) * C, 23), out0 = rnd16(size_t(s.N) * C, 24);
    std::vector<bf16> gathered(size_t(n) * C), out = out0;
    cpu().moe_gather(gathered.data(), x.data(), rows.data(), n, C, s.k);
    // Expert by expert, as the executor scatters (a call's slots name distinct tokens).
    for (int e = 0; e < s.E; ++e)
      cpu().moe_scatter(out.data(), y.data() + size_t(offsets[size_t(e)]) * C, rows.data() + offsets[size_t(e)],
                        w.data(), offsets[size_t(e) + 1] - offsets[size_t(e)], C, s.k);

    DeviceBuf<bf16> glog(logits), gx(x), gy(y), gout(out0), ggath(size_t(n) * C);
    DeviceBuf<int32_t> gidx(static_cast<size_t>(n)), grows(static_cast<size_t>(n)), goff(size_t(s.E) + 1);
    DeviceBuf<float> gw(static_cast<size_t>(n)), gstats(std::vector<float>(2 * size_t(s.E), 0.f));
    settle();
    gpu().moe_route_forward(gidx.get(), gw.get(), gstats.get(), glog.get(), s);
    gpu().moe_sort(grows.get(), goff.get(), gidx.get(), s.N, s.E, s.k);
    gpu().moe_gather(ggath.get(), gx.get(), grows.get(), n, C, s.k);
    for (int e = 0; e < s.E; ++e)
      gpu().moe_scatter(gout.get(), gy.get() + size_t(offsets[size_t(e)]) * C, grows.get() + offsets[size_t(e)],
                        gw.get(), offsets[size_t(e) + 1] - offsets[size_t(e)], C, s.k);
    expect_no_device_error();
    EXPECT_EQ(download(gidx), idx) << "the experts chosen";
    expect_f32_near(download(gw), w, 1e-6, "routing weights");
    expect_f32_near(download(gstats), stats, 1e-6, "statistics");
    EXPECT_EQ(download(grows), rows) << "the permutation";
    EXPECT_EQ(download(goff), offsets) << "the experts' offsets";
    expect_bits(ggath.download(), gathered, "gather");
    expect_bits(gout.download(), out, "weighted scatter (+=)");
  }
}

TEST_F(CudaBf16Ops, MoeBackwardsMatchTheCpuTable) {
  RouterShape s;
  s.N = 41, s.E = 6, s.k = 2, s.kind = RouterKind::kSoftmaxTopK, s.renormalize = true;
  const int C = 40, F = 24, n = s.N * s.k;
  const auto logits = router_logits16(size_t(s.N) * s.E, 31);
  std::vector<int32_t> idx(static_cast<size_t>(n)), rows(static_cast<size_t>(n)), offsets(size_t(s.E) + 1);
  std::vector<float> w(static_cast<size_t>(n)), stats(2 * size_t(s.E), 0.f);
  cpu().moe_route_forward(idx.data(), w.data(), stats.data(), logits.data(), s);
  cpu().moe_sort(rows.data(), offsets.data(), idx.data(), s.N, s.E, s.k);
  const auto h = rnd16(size_t(n) * F, 32), b = rnd16(size_t(C), 33), dh0 = rnd16(size_t(n) * F, 34),
             dy0 = rnd16(size_t(n) * C, 35);
  const auto dwr = cudatest::random_floats(size_t(n), 36);
  const float aux = 0.0123f;
  std::vector<bf16> dh = dh0, dy = dy0, dlogits(size_t(s.N) * s.E);
  std::vector<float> dw(static_cast<size_t>(n));
  cpu().moe_weight_backward(dw.data(), dh.data(), dy.data(), h.data(), b.data(), rows.data(), w.data(), n, F, C);
  cpu().moe_route_backward(dlogits.data(), dwr.data(), logits.data(), idx.data(), w.data(), stats.data(), aux, s);

  DeviceBuf<bf16> gh(h), gb(b), gdh(dh0), gdy(dy0), glog(logits), gdl(size_t(s.N) * s.E);
  DeviceBuf<int32_t> grows(rows), gidx(idx);
  DeviceBuf<float> gw(w), gdw(static_cast<size_t>(n)), gdwr(dwr), gcounts(stats);
  settle();
  gpu().moe_weight_backward(gdw.get(), gdh.get(), gdy.get(), gh.get(), gb.get(), grows.get(), gw.get(), n, F, C);
  gpu().moe_route_backward(gdl.get(), gdwr.get(), glog.get(), gidx.get(), gw.get(), gcounts.get(), aux, s);
  expect_no_device_error();
  expect_f32_near(gdw.download(), dw, 1e-5, "routing weights' gradient (fp32 dot products)");
  expect_bits(gdh.download(), dh, "dh weighted (one rounding)");
  expect_bits(gdy.download(), dy, "dy weighted (one rounding)");
  expect_bf16_near(gdl.download(), dlogits, 2, 1.0 / 4096, "router dlogits");
}

TEST_F(CudaBf16Ops, SigmoidGateMatchesTheCpuTable) {
  const int N = 29, C = 56;
  const size_t nc = size_t(N) * C;
  const auto y = rnd16(nc, 41), g = rnd16(size_t(N), 42, -4, 4), out0 = rnd16(nc, 43), dout = rnd16(nc, 44);
  std::vector<bf16> out = out0, dy(nc), dg(static_cast<size_t>(N));
  cpu().sigmoid_gate_forward(out.data(), y.data(), g.data(), N, C);
  cpu().sigmoid_gate_backward(dy.data(), dg.data(), dout.data(), y.data(), g.data(), N, C);
  DeviceBuf<bf16> gy(y), gg(g), gout(out0), gdout(dout), gdy(nc), gdg(static_cast<size_t>(N));
  settle();
  gpu().sigmoid_gate_forward(gout.get(), gy.get(), gg.get(), N, C);
  gpu().sigmoid_gate_backward(gdy.get(), gdg.get(), gdout.get(), gy.get(), gg.get(), N, C);
  expect_no_device_error();
  expect_bf16_near(gout.download(), out, 2, 1.0 / 4096, "out += sigmoid(g) y");
  expect_bf16_near(gdy.download(), dy, 2, 1.0 / 4096, "dy");
  expect_bf16_near(gdg.download(), dg, 2, 1.0 / 4096, "dg (a dot product per token)");
}

}  // namespace
}  // namespace mt

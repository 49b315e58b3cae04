// The CUDA mixture-of-experts kernels (kernels/cuda/moe.cuh) and attention sinks
// (kernels/cuda/attention_sinks.cuh) against the CPU reference in double (kernels/moe.h,
// kernels/attention.h) on the same inputs — bf16 inputs rounded first — at odd shapes, in fp32
// and bf16 storage, outputs poisoned with NaN (accumulating ones prefilled with data); and
// bitwise-equal reruns of the sort, the router's choice and statistics and the sinks' gradient.
// Tolerances:
//  * discrete outputs (the chosen experts, the sort's rows and offsets) and copies (the gather)
//    are exact: the router's logits here are multiples of 1/16 (exact in bf16), so two experts'
//    keys are equal (a tie, to the lower index on both sides) or differ by 6% or more;
//  * fp32 outputs: 1e-5 of (|ref| + rms(ref)) — short fp32 computations (a softmax over at most
//    128 experts, a dot product over one row) whose error is a few fp32 ulps of the terms;
//    sums over many rows (statistics, the sinks' gradient) get 1e-5 (1 + rows / 1000);
//  * bf16 outputs: one bf16 ulp of the reference (the single rounding of an fp32 value that is
//    itself within the fp32 bound) plus the fp32 bound.
// Skips without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <type_traits>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cuda/attention_sinks.cuh"
#include "kernels/cuda/moe.cuh"
#include "kernels/moe.h"
#include "tests/cuda/cuda_test_util.h"

namespace mt {
namespace {

using cudatest::DeviceBuf;

// ---- storage in either precision ------------------------------------------------------------

// Host values in storage type T (float or bf16) and the same values in double.
template <typename T>
struct Data {
  std::vector<T> h;
  std::vector<double> d;
};
template <typename T>
Data<T> from_doubles(const std::vector<double>& v) {
  Data<T> x;
  x.h.resize(v.size());
  x.d.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if constexpr (std::is_same_v<T, bf16>) {
      x.h[i] = float_to_bf16(float(v[i]));
      x.d[i] = bf16_to_float(x.h[i]);
    } else {
      x.h[i] = float(v[i]);
      x.d[i] = x.h[i];
    }
  }
  return x;
}
template <typename T>
Data<T> random_data(size_t n, uint32_t seed, double lo = -1, double hi = 1) {
  const auto f = cudatest::random_floats(n, seed, lo, hi);
  return from_doubles<T>(std::vector<double>(f.begin(), f.end()));
}

// The kernels' element type: __nv_bfloat16 for mt::bf16.
template <typename T>
using Dev = std::conditional_t<std::is_same_v<T, bf16>, __nv_bfloat16, float>;
template <typename T>
Dev<T>* dp(const DeviceBuf<T>& b) {
  return reinterpret_cast<Dev<T>*>(b.get());
}

template <typename T>
std::vector<float> download(const DeviceBuf<T>& b) {
  if constexpr (std::is_same_v<T, bf16>) return cudatest::got(b);
  else return b.download();
}

double bf16_ulp(double x) {
  if (x == 0 || !std::isfinite(x)) return 0;
  int e = 0;
  std::frexp(x, &e);
  return std::ldexp(1.0, e - 8);
}

// An output stored in T: rtol * (|ref| + rms), plus one bf16 ulp of ref in bf16.
template <typename T>
void expect_stored(const DeviceBuf<T>& got, const std::vector<double>& ref, double rtol, const std::string& what) {
  std::vector<double> slack;
  if constexpr (std::is_same_v<T, bf16>)
    for (double r : ref) slack.push_back(bf16_ulp(r));
  cudatest::expect_close(download(got), ref, rtol, what, 0, nullptr, slack);
}

template <typename U>
void expect_exact(const std::vector<U>& got, const std::vector<U>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(U)) != 0 && ++bad <= 5)
      ADD_FAILURE() << what << "[" << i << "]: got " << double(got[i]) << ", want " << double(want[i]);
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements differ";
}

template <typename T>
const char* dtype() {
  return std::is_same_v<T, bf16> ? "bf16" : "fp32";
}

cudaStream_t stream() { return cudatest::test_stream(); }

// ---- inputs ----------------------------------------------------------------------------------

// Router logits [N, E], multiples of 1/16 in [-4, 4) (exact in bf16 and fp32): each token a
// random permutation of distinct values, except token 0 (all equal: the top k is 0 .. k-1) and
// token 1 (values in pairs: ties inside the top k).
std::vector<double> router_logits(int N, int E, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<double> l(size_t(N) * E);
  std::vector<int> order(static_cast<size_t>(E));
  for (int t = 0; t < N; ++t) {
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (int e = 0; e < E; ++e) {
      int v = order[size_t(e)];
      if (t == 0) v = 0;
      if (t == 1) v /= 2;
      l[size_t(t) * E + e] = (v - std::min(E, 128) / 2) / 16.0 + (t % 3) / 16.0;
      l[size_t(t) * E + e] = std::max(-4.0, std::min(l[size_t(t) * E + e], 3.9375));
    }
  }
  return l;
}

// idx [N, k]: each token's k distinct experts from `experts`, in random order.
std::vector<int32_t> routed(int N, int k, const std::vector<int>& experts, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> order(experts.size());
  std::vector<int32_t> idx;
  for (int t = 0; t < N; ++t) {
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (int j = 0; j < k; ++j) idx.push_back(experts[size_t(order[size_t(j)])]);
  }
  return idx;
}
std::vector<int> all_experts(int E) {
  std::vector<int> v(static_cast<size_t>(E));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

struct Router {
  int N, E, k;
};
// The last: past 16384 tokens the router's statistics blocks hold more than 32 tokens
// (route_tokens_per_block: 40 here, 501 blocks, the last of 11), as at every real shape.
const Router kRouters[] = {{37, 7, 3}, {5, 32, 1}, {300, 33, 4}, {1000, 128, 8}, {3, 2, 2}, {20011, 128, 4}};

RouterShape shape(const Router& r, RouterKind kind, bool renormalize) {
  RouterShape s;
  s.N = r.N, s.E = r.E, s.k = r.k, s.kind = kind, s.renormalize = renormalize;
  return s;
}

struct Kind {
  RouterKind kind;
  bool renormalize;
  const char* name;
};
const Kind kKinds[] = {{RouterKind::kSoftmaxTopK, false, "softmax, top k"},
                       {RouterKind::kSoftmaxTopK, true, "softmax, top k, renormalised"},
                       {RouterKind::kTopKSoftmax, false, "top k, softmax"}};

// ---- the router ------------------------------------------------------------------------------

template <typename T>
void route_forward_matches_cpu() {
  for (const Router r : kRouters)
    for (const Kind kind : kKinds) {
      SCOPED_TRACE(testing::Message() << dtype<T>() << " N=" << r.N << " E=" << r.E << " k=" << r.k << " "
                                      << kind.name);
      const RouterShape s = shape(r, kind.kind, kind.renormalize);
      const size_t slots = size_t(r.N) * r.k;
      const auto logits = from_doubles<T>(router_logits(r.N, r.E, 1));
      const auto stats0 = cudatest::random_floats(2 * size_t(r.E), 2);  // accumulates
      std::vector<int32_t> idx(slots);
      std::vector<double> w(slots), stats(stats0.begin(), stats0.end());
      cpu::moe_route_forward<double, double>(idx.data(), w.data(), stats.data(), logits.d.data(), s);
      DeviceBuf<T> gl(logits.h);
      DeviceBuf<int32_t> gidx(slots);
      DeviceBuf<float> gw(slots), gstats(stats0), scratch(cuda::moe_route_forward_scratch(s));
      MT_EXPECT_CUDA_OK(
          cuda::moe_route_forward(gidx.get(), gw.get(), gstats.get(), dp(gl), s, scratch.get(), stream()));
      expect_exact(gidx.download(), idx, "idx");
      cudatest::expect_close(gw.download(), w, 1e-5, "w");
      cudatest::expect_close(gstats.download(), stats, 1e-5 * (1 + r.N / 1000.0), "stats (+=)");
      // The counts are exact: integers added to the prefill in fp32.
      const auto got = gstats.download();
      for (int e = 0; e < r.E; ++e) EXPECT_EQ(got[size_t(e)], float(stats[size_t(e)])) << "count of expert " << e;
      // Without statistics: the same choice.
      DeviceBuf<int32_t> gidx2(slots);
      DeviceBuf<float> gw2(slots);
      MT_EXPECT_CUDA_OK(cuda::moe_route_forward(gidx2.get(), gw2.get(), nullptr, dp(gl), s, nullptr, stream()));
      expect_exact(gidx2.download(), idx, "idx without stats");
      cudatest::expect_bitwise(gw2.download(), gw.download(), "w without stats");
    }
}
TEST(CudaMoe, RouteForwardMatchesCpuFp32) {
  MT_REQUIRE_CUDA();
  route_forward_matches_cpu<float>();
}
TEST(CudaMoe, RouteForwardMatchesCpuBf16) {
  MT_REQUIRE_CUDA();
  route_forward_matches_cpu<bf16>();
}

// Random logits (no care for ties) at a large shape: the choice, weights and statistics twice.
TEST(CudaMoe, RouteForwardIsDeterministic) {
  MT_REQUIRE_CUDA();
  const Router r{20011, 128, 8};
  const RouterShape s = shape(r, RouterKind::kSoftmaxTopK, true);
  const size_t slots = size_t(r.N) * r.k;
  DeviceBuf<float> gl(cudatest::random_floats(size_t(r.N) * r.E, 3, -3, 3)),
      scratch(cuda::moe_route_forward_scratch(s));
  std::vector<int32_t> idx0;
  std::vector<float> w0, stats0;
  for (int rep = 0; rep < 2; ++rep) {
    DeviceBuf<int32_t> gidx(slots);
    DeviceBuf<float> gw(slots), gstats(std::vector<float>(2 * size_t(r.E), 0.f));
    MT_EXPECT_CUDA_OK(
        cuda::moe_route_forward(gidx.get(), gw.get(), gstats.get(), gl.get(), s, scratch.get(), stream()));
    if (rep == 0) {
      idx0 = gidx.download(), w0 = gw.download(), stats0 = gstats.download();
      continue;
    }
    expect_exact(gidx.download(), idx0, "idx twice");
    cudatest::expect_bitwise(gw.download(), w0, "w twice");
    cudatest::expect_bitwise(gstats.download(), stats0, "stats twice");
  }
}

template <typename T>
void route_backward_matches_cpu() {
  for (const Router r : kRouters)
    for (const Kind kind : kKinds)
      for (const bool balance : {true, false}) {
        SCOPED_TRACE(testing::Message() << dtype<T>() << " N=" << r.N << " E=" << r.E << " k=" << r.k << " "
                                        << kind.name << (balance ? ", load balancing" : ""));
        const RouterShape s = shape(r, kind.kind, kind.renormalize);
        const size_t slots = size_t(r.N) * r.k, n = size_t(r.N) * r.E;
        const auto logits = from_doubles<T>(router_logits(r.N, r.E, 4));
        std::vector<int32_t> idx(slots);
        std::vector<double> wd(slots), stats(2 * size_t(r.E), 0.0);
        cpu::moe_route_forward<double, double>(idx.data(), wd.data(), stats.data(), logits.d.data(), s);
        const std::vector<float> w(wd.begin(), wd.end()), counts(stats.begin(), stats.begin() + r.E);
        const auto dw = cudatest::random_floats(slots, 5);
        const float aux = 0.0123f;
        std::vector<double> dlogits(n);
        const auto wdd = cudatest::to_double(w), dwd = cudatest::to_double(dw), cd = cudatest::to_double(counts);
        cpu::moe_route_backward<double, double>(dlogits.data(), dwd.data(), logits.d.data(), idx.data(), wdd.data(),
                                                balance ? cd.data() : nullptr, aux, s);
        DeviceBuf<T> gl(logits.h), gd(n);
        DeviceBuf<int32_t> gidx(idx);
        DeviceBuf<float> gw(w), gdw(dw), gc(counts);
        MT_EXPECT_CUDA_OK(cuda::moe_route_backward(dp(gd), gdw.get(), dp(gl), gidx.get(), gw.get(),
                                                   balance ? gc.get() : nullptr, aux, s, stream()));
        expect_stored(gd, dlogits, 1e-5, "dlogits");
      }
}
TEST(CudaMoe, RouteBackwardMatchesCpuFp32) {
  MT_REQUIRE_CUDA();
  route_backward_matches_cpu<float>();
}
TEST(CudaMoe, RouteBackwardMatchesCpuBf16) {
  MT_REQUIRE_CUDA();
  route_backward_matches_cpu<bf16>();
}

// ---- the permutation -------------------------------------------------------------------------

struct SortCase {
  int N, E, k;
  std::vector<int> experts;  // those routed to (the others get no token)
};

std::vector<int32_t> run_sort(const std::vector<int32_t>& idx, int N, int E, int k, std::vector<int32_t>* offsets) {
  size_t bytes = 0;
  EXPECT_TRUE(cuda::moe_sort_scratch(&bytes, N, E, k).ok());
  DeviceBuf<char> scratch(bytes);
  DeviceBuf<int32_t> gidx(idx), grows(idx.size()), goff(size_t(E) + 1);
  const cuda::CudaStatus st = cuda::moe_sort(grows.get(), goff.get(), gidx.get(), N, E, k, scratch.get(), stream());
  EXPECT_TRUE(st.ok()) << cuda::describe(st);
  *offsets = goff.download();
  return grows.download();
}

TEST(CudaMoe, SortMatchesCpu) {
  MT_REQUIRE_CUDA();
  const SortCase cases[] = {{37, 7, 3, all_experts(7)},
                            {37, 9, 3, {1, 2, 3, 5, 6, 7}},  // experts 0, 4 and 8 unrouted
                            {1, 1, 1, {0}},
                            {1000, 60, 4, {0, 3, 4, 17, 18, 30, 58}},
                            {4099, 128, 8, all_experts(128)},
                            {2000, 300, 6, all_experts(300)}};  // 9 radix bits
  for (const SortCase& c : cases) {
    SCOPED_TRACE(testing::Message() << "N=" << c.N << " E=" << c.E << " k=" << c.k);
    const auto idx = routed(c.N, c.k, c.experts, 6);
    std::vector<int32_t> rows(idx.size()), offsets(size_t(c.E) + 1), got_offsets;
    cpu::moe_sort(rows.data(), offsets.data(), idx.data(), c.N, c.E, c.k);
    expect_exact(run_sort(idx, c.N, c.E, c.k, &got_offsets), rows, "rows");
    expect_exact(got_offsets, offsets, "offsets");
  }
}

// No tokens: every expert's range is empty.
TEST(CudaMoe, SortOfNoTokens) {
  MT_REQUIRE_CUDA();
  std::vector<int32_t> offsets;
  run_sort({}, 0, 5, 2, &offsets);
  expect_exact(offsets, std::vector<int32_t>(6, 0), "offsets");
}

TEST(CudaMoe, SortIsDeterministic) {
  MT_REQUIRE_CUDA();
  const int N = 30011, E = 256, k = 8;
  const auto idx = routed(N, k, all_experts(E), 7);
  std::vector<int32_t> off0, off1;
  const auto rows0 = run_sort(idx, N, E, k, &off0), rows1 = run_sort(idx, N, E, k, &off1);
  expect_exact(rows1, rows0, "rows twice");
  expect_exact(off1, off0, "offsets twice");
}

// ---- gather, scatter and the scatter's backward, one expert's call at a time ------------------

struct Rows {
  int N, C, E, k;
};
// The last: 4 tokens to one of 8 experts, so at least 4 experts get no slot (n = 0).
const Rows kRows[] = {{37, 33, 7, 3}, {300, 1000, 16, 2}, {5, 1, 3, 3}, {4, 40, 8, 1}};

template <typename T>
void gather_scatter_match_cpu() {
  for (const Rows r : kRows) {
    SCOPED_TRACE(testing::Message() << dtype<T>() << " N=" << r.N << " C=" << r.C << " E=" << r.E << " k=" << r.k);
    const size_t slots = size_t(r.N) * r.k, nx = size_t(r.N) * r.C;
    const auto idx = routed(r.N, r.k, all_experts(r.E), 8);
    std::vector<int32_t> rows(slots), off(size_t(r.E) + 1);
    cpu::moe_sort(rows.data(), off.data(), idx.data(), r.N, r.E, r.k);
    const auto x = random_data<T>(nx, 9);
    const auto wf = cudatest::random_floats(slots, 10, 0, 1);
    const auto wd = cudatest::to_double(wf);
    DeviceBuf<T> gx(x.h), gout(random_data<T>(nx, 11).h), gout_unweighted(random_data<T>(nx, 12).h);
    DeviceBuf<int32_t> grows(rows);
    DeviceBuf<float> gw(wf);
    for (int e = 0; e < r.E; ++e) {
      const int n = off[size_t(e) + 1] - off[size_t(e)];
      SCOPED_TRACE(testing::Message() << "expert " << e << ": " << n << " slots");
      const int32_t* er = rows.data() + off[size_t(e)];
      const int32_t* ger = grows.get() + off[size_t(e)];
      // gather: an exact copy of the expert's tokens.
      DeviceBuf<T> gg(size_t(n) * r.C);
      MT_EXPECT_CUDA_OK(cuda::moe_gather(dp(gg), dp(gx), ger, n, r.C, r.k, stream()));
      std::vector<double> gathered(size_t(n) * r.C);
      cpu::moe_gather(gathered.data(), x.d.data(), er, n, r.C, r.k);
      const auto gv = download(gg);
      expect_exact(std::vector<double>(gv.begin(), gv.end()), gathered, "gather");
      // scatter: the expert's output (the gathered rows scaled, as data) onto out, from what
      // out holds before this call; weighted and unweighted.
      const auto y = random_data<T>(size_t(n) * r.C, 100 + uint32_t(e));
      DeviceBuf<T> gy(y.h);
      for (const bool weighted : {true, false}) {
        DeviceBuf<T>& out = weighted ? gout : gout_unweighted;
        const auto before = download(out);
        std::vector<double> ref(before.begin(), before.end());
        cpu::moe_scatter<double, double>(ref.data(), y.d.data(), er, weighted ? wd.data() : nullptr, n, r.C, r.k);
        MT_EXPECT_CUDA_OK(
            cuda::moe_scatter(dp(out), dp(gy), ger, weighted ? gw.get() : nullptr, n, r.C, r.k, stream()));
        expect_stored(out, ref, 1e-6, weighted ? "scatter (+=)" : "unweighted scatter (+=)");
      }
      // the weighted scatter's backward behind the down projection: dh and dy weighted in place
      // (a product: rounded once), dw at the expert's slots only (the rest stays poisoned),
      // with the expert's output bias and without. dh and dy have one row more than the
      // expert's, which must stay as it was (a kernel running past row n fails here).
      const int F = 2 * r.C + 3;
      const auto h = random_data<T>(size_t(n) * F, 300 + uint32_t(e)), b = random_data<T>(size_t(r.C), 400 + uint32_t(e));
      const auto dh0 = random_data<T>(size_t(n + 1) * F, 500 + uint32_t(e));
      const auto dy0 = random_data<T>(size_t(n + 1) * r.C, 600 + uint32_t(e));
      const bool bias = e % 2 == 0;
      DeviceBuf<T> gh(h.h), gb(b.h), gdh(dh0.h), gdy(dy0.h);
      DeviceBuf<float> gdw(slots);
      std::vector<double> dh = dh0.d, dy = dy0.d, dw(slots, std::nan(""));
      cpu::moe_weight_backward<double, double>(dw.data(), dh.data(), dy.data(), h.d.data(), bias ? b.d.data() : nullptr,
                                               er, wd.data(), n, F, r.C);
      MT_EXPECT_CUDA_OK(cuda::moe_weight_backward(gdw.get(), dp(gdh), dp(gdy), dp(gh), bias ? dp(gb) : nullptr, ger,
                                                  gw.get(), n, F, r.C, stream()));
      expect_stored(gdh, dh, 1e-6, "weight backward dh");
      expect_stored(gdy, dy, 1e-6, "weight backward dy");
      const auto got_dw = gdw.download();
      std::vector<float> written;
      std::vector<double> want;
      for (size_t i = 0; i < slots; ++i) {
        if (std::isnan(dw[i])) EXPECT_TRUE(std::isnan(got_dw[i])) << "dw[" << i << "] written, not the expert's slot";
        else written.push_back(got_dw[i]), want.push_back(dw[i]);
      }
      cudatest::expect_close(written, want, 1e-5, "weight backward dw");
    }
  }
}
TEST(CudaMoe, GatherScatterMatchCpuFp32) {
  MT_REQUIRE_CUDA();
  gather_scatter_match_cpu<float>();
}
TEST(CudaMoe, GatherScatterMatchCpuBf16) {
  MT_REQUIRE_CUDA();
  gather_scatter_match_cpu<bf16>();
}

// ---- Qwen2-MoE's shared-expert gate ----------------------------------------------------------

template <typename T>
void sigmoid_gate_matches_cpu() {
  for (const Rows r : kRows) {
    SCOPED_TRACE(testing::Message() << dtype<T>() << " N=" << r.N << " C=" << r.C);
    const size_t n = size_t(r.N) * r.C;
    const auto y = random_data<T>(n, 13), g = random_data<T>(size_t(r.N), 14, -4, 4), dout = random_data<T>(n, 15);
    const auto out0 = random_data<T>(n, 16);
    std::vector<double> out = out0.d, dy(n), dg(size_t(r.N));
    cpu::sigmoid_gate_forward<double>(out.data(), y.d.data(), g.d.data(), r.N, r.C);
    cpu::sigmoid_gate_backward<double>(dy.data(), dg.data(), dout.d.data(), y.d.data(), g.d.data(), r.N, r.C);
    DeviceBuf<T> gy(y.h), gg(g.h), gdout(dout.h), gout(out0.h), gdy(n), gdg(size_t(r.N));
    MT_EXPECT_CUDA_OK(cuda::sigmoid_gate_forward(dp(gout), dp(gy), dp(gg), r.N, r.C, stream()));
    MT_EXPECT_CUDA_OK(cuda::sigmoid_gate_backward(dp(gdy), dp(gdg), dp(gdout), dp(gy), dp(gg), r.N, r.C, stream()));
    expect_stored(gout, out, 1e-6, "out (+=)");
    expect_stored(gdy, dy, 1e-6, "dy");
    expect_stored(gdg, dg, 1e-5, "dg");
  }
}
TEST(CudaMoe, SigmoidGateMatchesCpuFp32) {
  MT_REQUIRE_CUDA();
  sigmoid_gate_matches_cpu<float>();
}
TEST(CudaMoe, SigmoidGateMatchesCpuBf16) {
  MT_REQUIRE_CUDA();
  sigmoid_gate_matches_cpu<bf16>();
}

// ---- attention sinks -------------------------------------------------------------------------

struct Sinks {
  int B, T, H, D;
};

template <typename T>
void attention_sinks_match_cpu() {
  for (const Sinks s : {Sinks{2, 37, 6, 10}, Sinks{3, 300, 8, 64}, Sinks{1, 1, 1, 1}, Sinks{2, 1000, 4, 129}}) {
    SCOPED_TRACE(testing::Message() << dtype<T>() << " B=" << s.B << " T=" << s.T << " H=" << s.H << " D=" << s.D);
    const size_t no = size_t(s.B) * s.T * s.H * s.D, nl = size_t(s.B) * s.H * s.T;
    const auto sinks = random_data<T>(size_t(s.H), 17, -2, 2), out0 = random_data<T>(no, 18);
    const auto lse0 = cudatest::random_floats(nl, 19, -1, 3);
    std::vector<double> out = out0.d, lse = cudatest::to_double(lse0);
    cpu::attention_sinks_forward<double>(out.data(), lse.data(), sinks.d.data(), s.B, s.T, s.H, s.D);
    DeviceBuf<T> gs(sinks.h), gout(out0.h);
    DeviceBuf<float> glse(lse0);
    MT_EXPECT_CUDA_OK(cuda::attention_sinks_forward(dp(gout), glse.get(), dp(gs), s.B, s.T, s.H, s.D, stream()));
    expect_stored(gout, out, 1e-5, "out");
    cudatest::expect_close(glse.download(), lse, 1e-6, "lse");
    // The backward on the folded out (as stored) and lse, dsinks prefilled.
    const auto folded_h = gout.download();
    std::vector<double> folded(no);
    for (size_t i = 0; i < no; ++i) {
      if constexpr (std::is_same_v<T, bf16>) folded[i] = bf16_to_float(folded_h[i]);
      else folded[i] = folded_h[i];
    }
    const auto lse_f = glse.download();
    const auto lse_d = cudatest::to_double(lse_f);
    const auto dout = random_data<T>(no, 20);
    const auto ds0 = cudatest::random_floats(size_t(s.H), 21);
    std::vector<double> ds(ds0.begin(), ds0.end());
    cpu::attention_sinks_backward<double>(ds.data(), dout.d.data(), folded.data(), lse_d.data(), sinks.d.data(), s.B,
                                          s.T, s.H, s.D);
    DeviceBuf<T> gdout(dout.h);
    DeviceBuf<float> gds(ds0), scratch(cuda::attention_sinks_backward_scratch(s.B, s.T, s.H));
    MT_EXPECT_CUDA_OK(cuda::attention_sinks_backward(gds.get(), dp(gdout), dp(gout), glse.get(), dp(gs), s.B, s.T, s.H,
                                                     s.D, scratch.get(), stream()));
    cudatest::expect_close(gds.download(), ds, 1e-5 * (1 + s.B * s.T / 1000.0), "dsinks (+=)");
  }
}
TEST(CudaMoe, AttentionSinksMatchCpuFp32) {
  MT_REQUIRE_CUDA();
  attention_sinks_match_cpu<float>();
}
TEST(CudaMoe, AttentionSinksMatchCpuBf16) {
  MT_REQUIRE_CUDA();
  attention_sinks_match_cpu<bf16>();
}

TEST(CudaMoe, AttentionSinksBackwardIsDeterministic) {
  MT_REQUIRE_CUDA();
  const int B = 4, T = 2049, H = 8, D = 64;
  const size_t no = size_t(B) * T * H * D;
  DeviceBuf<float> gout(cudatest::random_floats(no, 22)), gdout(cudatest::random_floats(no, 23));
  DeviceBuf<float> glse(cudatest::random_floats(size_t(B) * H * T, 24, 0, 3)), gs(cudatest::random_floats(H, 25));
  DeviceBuf<float> scratch(cuda::attention_sinks_backward_scratch(B, T, H));
  std::vector<float> first;
  for (int rep = 0; rep < 2; ++rep) {
    DeviceBuf<float> gds(std::vector<float>(H, 0.f));
    MT_EXPECT_CUDA_OK(cuda::attention_sinks_backward(gds.get(), gdout.get(), gout.get(), glse.get(), gs.get(), B, T, H,
                                                     D, scratch.get(), stream()));
    if (rep == 0) first = gds.download();
    else cudatest::expect_bitwise(gds.download(), first, "dsinks twice");
  }
}

}  // namespace
}  // namespace mt

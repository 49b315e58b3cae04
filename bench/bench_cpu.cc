// Suites that measure this machine's limits: fp32 GEMM (sgemm) and the fused AdamW against a
// threaded memcpy over the same threads (adamw).
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <vector>

#include "bench/bench.h"
#include "engine/optim/optimizer.h"
#include "engine/base/thread_pool.h"
#include "kernels/matmul.h"

namespace mt::bench {

double measure_sgemm_flops(int n, int reps) {
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  cpu::gemm<float>(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);  // warm up
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    cpu::gemm<float>(false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    times.push_back(seconds_since(t0));
  }
  return 2.0 * double(n) * n * n / median(times);
}

int run_sgemm(const Flags& f) {
  auto n = f.num("n", 2048), reps = f.num("reps", 5);
  if (!n.ok() || !reps.ok() || !f.check_all_used().ok()) {
    std::fprintf(stderr, "sgemm: bad flags\n");
    return 2;
  }
  const double flops = measure_sgemm_flops(int(*n), int(*reps));
  emit(Json::object({{"suite", "sgemm"}, {"n", int64_t(*n)}, {"gflops", flops / 1e9}}), f.json());
  return 0;
}

namespace {

// One layout's arrays for `n` parameters: fp32 masters, gradient and moments in S, an optional
// bf16 shadow; touched once by the pool's threads in the pieces they update (first touch).
template <typename S>
struct AdamArrays {
  std::vector<float> p;
  std::vector<S> g, m, v;
  std::vector<bf16> shadow;
  AdamArrays(size_t n, bool with_shadow) : p(n, 0.1f), g(n, from_float<S>(0.01f)), m(n), v(n) {
    if (with_shadow) shadow.resize(n);
  }
  UnitState<S> state() { return {p.data(), g.data(), m.data(), v.data(), shadow.empty() ? nullptr : shadow.data()}; }
  // Bytes the update moves per parameter: reads p, g, m, v; writes p, m, v (and the shadow).
  static double bytes(bool with_shadow) { return 4 + 3.0 * sizeof(S) + 4 + 2.0 * sizeof(S) + (with_shadow ? 2 : 0); }
};

// The same access pattern with no arithmetic: read p, g, m, v; write p, m, v (and a shadow).
// The ceiling of this pattern on this memory, over the same threads and pieces as the update.
template <typename S>
void stream_pattern(ThreadPool& pool, AdamArrays<S>& a, size_t n) {
  constexpr size_t kPiece = size_t(1) << 16;
  const bool sh = !a.shadow.empty();
  pool.parallel_for(int((n + kPiece - 1) / kPiece), [&](int k) {
    const size_t lo = size_t(k) * kPiece, hi = std::min(n, lo + kPiece);
    for (size_t i = lo; i < hi; ++i) {
      const float x = a.p[i] + to_float(a.g[i]);
      const S mv = a.m[i], vv = a.v[i];
      a.p[i] = x;
      a.m[i] = vv;
      a.v[i] = mv;
      if (sh) {  // truncated, not rounded: the pattern's bytes, not the rounding's branches
        uint32_t u;
        std::memcpy(&u, &x, sizeof u);
        a.shadow[i] = bf16{uint16_t(u >> 16)};
      }
    }
  });
}

template <typename S>
Json measure_layout(const char* name, ThreadPool& pool, size_t n, bool with_shadow, int reps) {
  AdamArrays<S> a(n, with_shadow);
  ParamSchema unit{UnitKind::kDecoder, 0, -1, {{"w", {int64_t(n)}, 0, n, true}}, n};
  cpu::AdamWParams hp{1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1};
  const UnitState<S> st = a.state();
  const double t_adam = median_seconds(reps, [&] { adamw_unit(pool, unit, st, hp); });
  const double t_stream = median_seconds(reps, [&] { stream_pattern(pool, a, n); });
  const double b = AdamArrays<S>::bytes(with_shadow);
  return Json::object({{"layout", name},
                       {"bytes_per_param", b},
                       {"params_per_second", double(n) / t_adam},
                       {"bytes_per_second", b * double(n) / t_adam},
                       {"stream_bytes_per_second", b * double(n) / t_stream},
                       {"bandwidth_fraction", t_stream / t_adam}});
}

}  // namespace

int run_adamw(const Flags& f) {
  auto params = f.num("params", 1e8), threads = f.num("threads", 0), reps = f.num("reps", 5);
  if (!params.ok() || !threads.ok() || !reps.ok() || !f.check_all_used().ok()) {
    std::fprintf(stderr, "adamw: bad flags (known: --params --threads --reps)\n");
    return 2;
  }
  const size_t n = size_t(*params);
  ThreadPool pool{int(*threads)};
  // Every layout the HostStore keeps: exact (fp32 moments and gradient), compact (bf16), each
  // with and without the bf16 shadow the uploads copy.
  Json layouts = Json::array({measure_layout<float>("exact", pool, n, false, int(*reps)),
                              measure_layout<float>("exact+shadow", pool, n, true, int(*reps)),
                              measure_layout<bf16>("compact", pool, n, false, int(*reps)),
                              measure_layout<bf16>("compact+shadow", pool, n, true, int(*reps))});
  // And a plain memcpy of the exact layout's bytes (read 14 B + write 14 B per parameter).
  const size_t bytes = n * 14;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  const int parts = pool.size() * 4;
  const double t_copy = median_seconds(int(*reps), [&] {
    pool.parallel_for(parts, [&](int i) {
      size_t lo = bytes * size_t(i) / size_t(parts), hi = bytes * size_t(i + 1) / size_t(parts);
      std::memcpy(dst.data() + lo, src.data() + lo, hi - lo);
    });
  });
  const Json& exact = layouts.items()[0];
  const double adam_bps = exact.find("bytes_per_second")->as_double(), copy_bps = 2.0 * double(bytes) / t_copy;
  emit(Json::object({{"suite", "adamw"},
                     {"params", int64_t(n)},
                     {"threads", int64_t(pool.size())},
                     {"params_per_second", exact.find("params_per_second")->as_double()},
                     {"bytes_per_second", adam_bps},
                     {"copy_bytes_per_second", copy_bps},
                     {"bandwidth_fraction", adam_bps / copy_bps},
                     {"layouts", layouts}}),
       f.json());
  return 0;
}

}  // namespace mt::bench

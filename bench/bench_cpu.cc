// Suites that measure this machine's limits: fp32 GEMM (sgemm) and the fused AdamW against a
// threaded memcpy over the same threads (adamw).
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <vector>

#include "bench/bench.h"
#include "engine/optim/optimizer.h"
#include "engine/base/host_memory.h"
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

constexpr size_t kPiece = kOptimizerPiece;  // the same blocks as the update

// One layout's arrays for `n` parameters: fp32 masters, gradient and moments in S, an optional
// bf16 shadow, from the allocator the CPU backend's HostStore uses (page-aligned: a vector's
// 16-byte-aligned data split every AVX-512 load over two cache lines and cost the update 5-10%),
// first touched by the pool's threads in the blocks that update them.
template <typename S>
struct AdamArrays {
  HostBuffer p, g, m, v, shadow;
  AdamArrays(ThreadPool& pool, size_t n, bool with_shadow) {
    auto take = [](size_t bytes) { return std::move(*HostBuffer::allocate(default_host_allocator(), bytes)); };
    p = take(n * 4), g = take(n * sizeof(S)), m = take(n * sizeof(S)), v = take(n * sizeof(S));
    if (with_shadow) shadow = take(n * 2);
    pool.parallel_ranges(n, kPiece, [&](size_t lo, size_t len) {
      const size_t hi = lo + len;
      std::fill(p.as<float>() + lo, p.as<float>() + hi, 0.1f);
      std::fill(g.as<S>() + lo, g.as<S>() + hi, from_float<S>(0.01f));
      std::fill(m.as<S>() + lo, m.as<S>() + hi, S{});
      std::fill(v.as<S>() + lo, v.as<S>() + hi, S{});
      if (with_shadow) std::fill(shadow.as<bf16>() + lo, shadow.as<bf16>() + hi, bf16{});
    });
  }
  UnitState<S> state() { return {p.as<float>(), g.as<S>(), m.as<S>(), v.as<S>(), shadow.as<bf16>()}; }
  // Bytes the update moves per parameter: reads p, g, m, v; writes p, m, v (and the shadow).
  static double bytes(bool with_shadow) { return 4 + 3.0 * sizeof(S) + 4 + 2.0 * sizeof(S) + (with_shadow ? 2 : 0); }
};

// The same access pattern with no arithmetic: read p, g, m, v; write p, m, v (and a shadow).
// The ceiling of this pattern on this memory, over the same threads and pieces as the update.
template <typename S>
void stream_pattern(ThreadPool& pool, AdamArrays<S>& a, size_t n) {
  const UnitState<S> st = a.state();
  float* p = st.master;
  S *g = st.grad, *m = st.m, *v = st.v;
  bf16* shadow = st.shadow;
  pool.parallel_ranges(n, kPiece, [&](size_t lo, size_t len) {
    for (size_t i = lo; i < lo + len; ++i) {
      const float x = p[i] + to_float(g[i]);
      const S mv = m[i], vv = v[i];
      p[i] = x;
      m[i] = vv;
      v[i] = mv;
      if (shadow) {  // truncated, not rounded: the pattern's bytes, not the rounding's branches
        uint32_t u;
        std::memcpy(&u, &x, sizeof u);
        shadow[i] = bf16{uint16_t(u >> 16)};
      }
    }
  });
}

template <typename S>
Json measure_layout(const char* name, ThreadPool& pool, size_t n, bool with_shadow, int reps) {
  AdamArrays<S> a(pool, n, with_shadow);
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
  // The optimizer's own threads: on a host of several NUMA nodes pinned over them, and every
  // array first touched by the worker that updates it (parallel_blocks gives worker b block b).
  ThreadPool pool{optimizer_placement(int(*threads))};
  // Every layout the HostStore keeps: exact (fp32 moments and gradient), compact (bf16), each
  // with and without the bf16 shadow the uploads copy.
  Json layouts = Json::array({measure_layout<float>("exact", pool, n, false, int(*reps)),
                              measure_layout<float>("exact+shadow", pool, n, true, int(*reps)),
                              measure_layout<bf16>("compact", pool, n, false, int(*reps)),
                              measure_layout<bf16>("compact+shadow", pool, n, true, int(*reps))});
  // And a plain memcpy of the exact layout's bytes (read 14 B + write 14 B per parameter), each
  // worker copying the part it first touched.
  const size_t bytes = n * 14;
  auto src_or = HostBuffer::allocate(default_host_allocator(), bytes), dst_or = HostBuffer::allocate(default_host_allocator(), bytes);
  if (!src_or.ok() || !dst_or.ok()) {
    std::fprintf(stderr, "adamw: no memory for the copy baseline (%zu bytes twice)\n", bytes);
    return 1;
  }
  HostBuffer src = std::move(*src_or), dst = std::move(*dst_or);
  const int parts = pool.size();
  auto part = [&](int i) { return std::pair<size_t, size_t>{bytes * size_t(i) / size_t(parts), bytes * size_t(i + 1) / size_t(parts)}; };
  pool.parallel_blocks(parts, [&](int i) {
    const auto [lo, hi] = part(i);
    std::memset(src.as<char>() + lo, 1, hi - lo);
    std::memset(dst.as<char>() + lo, 0, hi - lo);
  });
  const double t_copy = median_seconds(int(*reps), [&] {
    pool.parallel_blocks(parts, [&](int i) {
      const auto [lo, hi] = part(i);
      std::memcpy(dst.as<char>() + lo, src.as<char>() + lo, hi - lo);
    });
  });
  const Json& exact = layouts.items()[0];
  const double adam_bps = exact.find("bytes_per_second")->as_double(), copy_bps = 2.0 * double(bytes) / t_copy;
  emit(Json::object({{"suite", "adamw"},
                     {"params", int64_t(n)},
                     {"threads", int64_t(pool.size())},
                     {"numa", pool.placement().describe()},
                     {"params_per_second", exact.find("params_per_second")->as_double()},
                     {"bytes_per_second", adam_bps},
                     {"copy_bytes_per_second", copy_bps},
                     {"bandwidth_fraction", adam_bps / copy_bps},
                     {"layouts", layouts}}),
       f.json());
  return 0;
}

}  // namespace mt::bench

// Suites that measure this machine's limits: fp32 GEMM (sgemm) and the fused AdamW against a
// threaded memcpy over the same threads (adamw).
#include <cstdio>
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

int run_adamw(const Flags& f) {
  auto params = f.num("params", 1e8), threads = f.num("threads", 0), reps = f.num("reps", 5);
  if (!params.ok() || !threads.ok() || !reps.ok() || !f.check_all_used().ok()) {
    std::fprintf(stderr, "adamw: bad flags (known: --params --threads --reps)\n");
    return 2;
  }
  const size_t n = size_t(*params);
  ThreadPool pool{int(*threads)};
  ParamSchema unit{UnitKind::kDecoder, 0, {{"w", {int64_t(n)}, 0, n, true}}, n};
  std::vector<float> p(n, 0.1f), g(n, 0.01f), m(n, 0.0f), v(n, 0.0f);
  UnitState<float> st{p.data(), g.data(), m.data(), v.data(), nullptr};
  cpu::AdamWParams hp{1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1};
  const double t_adam = median_seconds(int(*reps), [&] { adamw_unit(pool, unit, st, hp); });

  // Baseline: the same bytes moved by memcpy over the same threads (read 14 B + write 14 B).
  const size_t bytes = n * 14;
  std::vector<char> src(bytes, 1), dst(bytes);
  const int parts = pool.size() * 4;
  const double t_copy = median_seconds(int(*reps), [&] {
    pool.parallel_for(parts, [&](int i) {
      size_t lo = bytes * size_t(i) / size_t(parts), hi = bytes * size_t(i + 1) / size_t(parts);
      std::memcpy(dst.data() + lo, src.data() + lo, hi - lo);
    });
  });
  const double adam_bps = 28.0 * double(n) / t_adam, copy_bps = 2.0 * double(bytes) / t_copy;
  emit(Json::object({{"suite", "adamw"},
                     {"params", int64_t(n)},
                     {"threads", int64_t(pool.size())},
                     {"params_per_second", double(n) / t_adam},
                     {"bytes_per_second", adam_bps},
                     {"copy_bytes_per_second", copy_bps},
                     {"bandwidth_fraction", adam_bps / copy_bps}}),
       f.json());
  return 0;
}

}  // namespace mt::bench

// The uploads suite: what each source of the bf16 weights that cross the link costs the CPU
// (planner.h, Bf16Uploads), per parameter, on this machine:
//  * shadow: the fused AdamW also writes the bf16 shadow (its pass with a shadow vs without,
//    over the optimizer's threads): once per step, overlapped with the next forward;
//  * convert: the uploader rounds the fp32 masters into staging before each copy (one thread,
//    as the uploader does it): twice per step (forward and backward fetch), ahead of the copy.
// Reported next to the link time of the same bf16 bytes at a given bandwidth (--link-gbps, an
// H200's ~50 GB/s by default), which is what the conversion must beat to stay off the critical path.
#include <cstdio>
#include <vector>

#include "bench/bench.h"
#include "engine/base/thread_pool.h"
#include "engine/optim/optimizer.h"

namespace mt::bench {
int run_uploads(const Flags& f) {
  auto params = f.num("params", 5e7), threads = f.num("threads", 0), reps = f.num("reps", 5);
  auto link = f.num("link-gbps", 50);
  if (!params.ok() || !threads.ok() || !reps.ok() || !link.ok() || !f.check_all_used().ok()) {
    std::fprintf(stderr, "uploads: bad flags (known: --params --threads --reps --link-gbps)\n");
    return 2;
  }
  const size_t n = size_t(*params);
  ThreadPool pool{int(*threads)};
  ParamSchema unit{UnitKind::kDecoder, 0, -1, {{"w", {int64_t(n)}, 0, n, true}}, n};
  std::vector<float> p(n, 0.1f), g(n, 0.01f), m(n, 0.0f), v(n, 0.0f);
  std::vector<bf16> shadow(n);
  cpu::AdamWParams hp{1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1};
  UnitState<float> plain{p.data(), g.data(), m.data(), v.data(), nullptr};
  UnitState<float> with_shadow{p.data(), g.data(), m.data(), v.data(), shadow.data()};
  const double t_plain = median_seconds(int(*reps), [&] { adamw_unit(pool, unit, plain, hp); });
  const double t_shadow = median_seconds(int(*reps), [&] { adamw_unit(pool, unit, with_shadow, hp); });
  const double t_convert = median_seconds(int(*reps), [&] {
    round_to_bf16(shadow.data(), p.data(), n);
  });
  const double link_s = 2.0 * double(n) / (*link * 1e9);  // one upload of the bf16 bytes
  const double N = double(n);
  emit(Json::object({{"suite", "uploads"},
                     {"params", int64_t(n)},
                     {"optimizer_threads", int64_t(pool.size())},
                     {"adamw_ns_per_param", 1e9 * t_plain / N},
                     {"adamw_with_shadow_ns_per_param", 1e9 * t_shadow / N},
                     // shadow: the extra optimizer time per parameter and step (all optimizer threads)
                     {"shadow_ns_per_param_step", 1e9 * (t_shadow - t_plain) / N},
                     {"shadow_host_bytes_per_param", 2},
                     // convert: one thread, two uploads a step
                     {"convert_ns_per_param_upload", 1e9 * t_convert / N},
                     {"convert_ns_per_param_step", 2e9 * t_convert / N},
                     {"convert_gb_per_second", 6.0 * N / t_convert / 1e9},  // 4 B read + 2 B written
                     {"link_gbps", *link},
                     {"link_ns_per_param_upload", 1e9 * link_s / N},
                     {"convert_vs_link", t_convert / link_s}}),
       f.json());
  return 0;
}

}  // namespace mt::bench

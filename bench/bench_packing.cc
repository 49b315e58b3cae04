// megatrain-bench packing: packing efficiency (real tokens / slots) of one epoch for example
// lengths drawn from a log-normal distribution (docs/PERF.md states the parameters and where
// they come from), packed (first fit over a window of open rows) and padded (one per row).
#include <cmath>
#include <random>

#include "bench/bench.h"
#include "engine/data/packing.h"

namespace mt::bench {

int run_packing(const Flags& f) {
  auto mean = f.num("mean", 115), sigma = f.num("sigma", 0.8), seq = f.num("seq-len", 2048),
       n = f.num("examples", 52002), window = f.num("window", 64), seed = f.num("seed", 1);
  for (auto* r : {&mean, &sigma, &seq, &n, &window, &seed})
    if (!r->ok()) return std::fprintf(stderr, "megatrain-bench: %s\n", r->status().message().c_str()), 2;
  if (Status s = f.check_all_used(); !s.ok()) return std::fprintf(stderr, "megatrain-bench: %s\n", s.message().c_str()), 2;
  if (*seq < 1 || *n < 1 || *mean < 1 || *sigma < 0 || *window < 1)
    return std::fprintf(stderr, "megatrain-bench: packing needs seq-len, examples, mean, window >= 1 and sigma >= 0\n"), 2;
  // A log-normal with the given mean: mu = ln(mean) - sigma^2 / 2.
  std::mt19937_64 rng(static_cast<uint64_t>(*seed));
  std::lognormal_distribution<double> dist(std::log(*mean) - *sigma * *sigma / 2, *sigma);
  std::vector<uint64_t> lengths(static_cast<size_t>(*n));
  uint64_t longer = 0, total = 0;
  for (auto& l : lengths) {
    l = std::max<uint64_t>(1, uint64_t(std::llround(dist(rng))));
    longer += l > uint64_t(*seq);
    total += l;
  }
  const int T = int(*seq);
  PackingOptions packed, padded;
  packed.window = int(*window);
  padded.packing = false;
  const auto t0 = std::chrono::steady_clock::now();
  const EpochLayout lp = pack_epoch(lengths, T, packed, 0);
  const double pack_seconds = seconds_since(t0);
  const EpochLayout ld = pack_epoch(lengths, T, padded, 0);
  Json r = Json::object({{"suite", "packing"},
                         {"examples", int64_t(lengths.size())},
                         {"mean_tokens", double(total) / double(lengths.size())},
                         {"sigma", *sigma},
                         {"seq_len", T},
                         {"longer_than_seq_len", int64_t(longer)},
                         {"window", int(*window)},
                         {"packed_rows", int64_t(lp.rows())},
                         {"packed_efficiency", lp.efficiency()},
                         {"padded_rows", int64_t(ld.rows())},
                         {"padded_efficiency", ld.efficiency()},
                         {"pack_epoch_seconds", pack_seconds}});
  emit(r, f.json());
  return 0;
}

}  // namespace mt::bench

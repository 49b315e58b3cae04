// Deterministic weight initialisation: norms 1, biases 0, matrices and embeddings N(0, std)
// with std = config.initializer_range. Every element's value depends only on (seed, tensor
// name, index), so the result is independent of memory layout, threads and backend.
#pragma once
#include <cstdint>

#include "engine/base/thread_pool.h"
#include "engine/model/param_schema.h"

namespace mt {

// On `pool`'s threads when given (a 7 B model is 7.6 G values at ~15-20 ns each on one core:
// minutes), in pieces of each tensor; the same bits either way.
void init_unit_weights(const ModelConfig& cfg, const ParamSchema& unit, float* weights, uint64_t seed,
                       ThreadPool* pool = nullptr);

// Counter-based generator used by init and the data sources: splitmix64 of a key.
uint64_t mix64(uint64_t x);
// A standard normal from two 64-bit counters (Box-Muller).
double normal_from(uint64_t key, uint64_t index);

}  // namespace mt

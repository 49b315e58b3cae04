// What the data-parallel tests share (CPU, resident and CUDA): the model and step they train —
// 4 micro-batches (2 per device at N = 2, 1 at N = 4) with clipping active — and how far two
// runs' masters are apart.
#pragma once
#include <algorithm>
#include <cmath>

#include "engine/exec/executor.h"
#include "engine/optim/host_store.h"
#include "tests/engine/test_model.h"

namespace mt::testing_util {

inline ModelConfig data_parallel_config(bool tied) {
  return test_model_config({"LlamaForCausalLM", 32, 3, 4, 2, 48, 64, tied});
}

inline TrainOptions data_parallel_options(Precision p) {
  TrainOptions o;
  o.seq_len = 16;
  o.micro_batch = 2;
  o.global_batch = 8;
  o.optimizer.lr = 3e-3f;
  o.optimizer.grad_clip = 0.5f;
  o.schedule = {1, LrDecay::kCosine, 0.1f, 5};
  o.precision = p;
  return o;
}

// The largest |a - b| / (|b| + 1e-3) over every master weight.
inline double max_master_rel_diff(const HostStore& a, const HostStore& b) {
  double worst = 0;
  for (size_t u = 0; u < a.num_units(); ++u)
    for (size_t i = 0; i < a.unit(u).numel; ++i)
      worst = std::max(worst, std::fabs(double(a.unit(u).master[i]) - double(b.unit(u).master[i])) /
                                  (std::fabs(double(b.unit(u).master[i])) + 1e-3));
  return worst;
}

}  // namespace mt::testing_util

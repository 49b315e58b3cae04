// AdamW over host-resident units, global-norm clipping and the learning-rate schedule.
// The per-element math is the fused kernel in kernels/adamw.h; this splits a unit's tensors
// over a thread pool and applies per-tensor weight decay (none on norms and biases).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "engine/model/param_schema.h"
#include "engine/base/status.h"
#include "engine/base/thread_pool.h"
#include "kernels/adamw.h"

namespace mt {

struct OptimizerConfig {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;  // global-norm clipping; <= 0 disables it
};
Status validate(const OptimizerConfig& c);

enum class LrDecay { kCosine, kLinear, kConstant };
Result<LrDecay> parse_lr_decay(const std::string& name);
const char* lr_decay_name(LrDecay d);

struct LrSchedule {
  int warmup_steps = 0;
  LrDecay decay = LrDecay::kCosine;
  float min_lr_ratio = 0.1f;
  long total_steps = 1;
  // Learning rate for the 0-based step `step`: linear warmup, then decay to min_lr_ratio * lr.
  float at(float base_lr, long step) const;
};

// Clipping factor for a global gradient norm: min(1, clip / (norm + 1e-6)); 1 when disabled.
float clip_factor(double grad_norm, float grad_clip);

// A unit's state in host memory. S is float (exact layout) or bf16 (compact layout).
template <typename S>
struct UnitState {
  float* master;
  S* grad;
  S* m;
  S* v;
  bf16* shadow;  // optional compute-dtype copy, written in the same pass
};

// Sum of squares of a unit's gradient, in double, deterministic (fixed split and order).
template <typename S>
double unit_grad_sumsq(ThreadPool& pool, const ParamSchema& u, const S* grad);

// The work item of adamw_unit and unit_grad_sumsq: a tensor is cut into pieces of at most this
// many elements, a thread's contiguous block of them at a time (ThreadPool::parallel_blocks).
inline constexpr size_t kOptimizerPiece = size_t(1) << 16;

// One AdamW step on every tensor of a unit.
template <typename S>
void adamw_unit(ThreadPool& pool, const ParamSchema& u, const UnitState<S>& st, const cpu::AdamWParams& p);
// One AdamW step on elements [offset, offset + n) of a unit, inside one tensor (whose weight-decay
// rule applies), on the calling thread. Elementwise: the same bits as adamw_unit gives them.
template <typename S>
void adamw_range(const ParamSchema& u, const UnitState<S>& st, const cpu::AdamWParams& p, size_t offset, size_t n);

// The elements [first, second) of unit u that worker b of a pool of `threads` updates in
// adamw_unit and sums in unit_grad_sumsq (empty past the last block): what a NUMA placement
// binds to that worker's node (HostStore::create).
std::vector<std::pair<size_t, size_t>> update_blocks(const ParamSchema& u, int threads);

}  // namespace mt

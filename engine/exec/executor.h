// Executor: runs optimizer steps of a model whose state lives in a HostStore. Two exist:
// ResidentExecutor (the reference: everything in one place, plain order) and
// StreamingExecutor (units stream through a bounded device). On the CPU backend they agree
// bit for bit.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/backend/ops.h"
#include "engine/data/data_source.h"
#include "engine/exec/engine_stats.h"
#include "engine/optim/host_store.h"
#include "engine/model/model_config.h"
#include "engine/optim/optimizer.h"

namespace mt {

// Bounds on a step's shape, so that no spec can make an executor (or the planner's arithmetic)
// size buffers without bound: a million-token context, a million sequences, 2^28 tokens a step.
struct TrainLimits {
  static constexpr int kSeqLen = 1 << 20;
  static constexpr int kBatch = 1 << 20;
  static constexpr int64_t kTokensPerStep = int64_t(1) << 28;
};

struct TrainOptions {
  int seq_len = 128;
  int micro_batch = 8;    // sequences per micro-batch
  int global_batch = 32;  // sequences per optimizer step
  OptimizerConfig optimizer;
  LrSchedule schedule;
  bool recompute = true;  // keep only layer inputs, recompute activations in backward
  MemoryLayout layout = MemoryLayout::kExact;
  int optimizer_threads = 0;  // 0: all cores
  int head_chunk = 256;       // tokens per chunk of the fused LM head + loss
  // Tokens per chunk of each decoder's MLP block (LayerShape::token_chunk). 0: the whole
  // micro-batch, unless the streaming planner must chunk to fit the device budget.
  int token_chunk = 0;
  // Compute dtype of weights and activations on the device (masters, moments and gradients on
  // the host are unchanged). bf16 keeps a bf16 shadow of the masters in the HostStore, written
  // by the fused AdamW, and that is what crosses the link.
  Precision precision = Precision::kFp32;
};
Result<Precision> parse_precision(const std::string& name);  // "fp32" | "bf16"
// As parse_precision, and "auto": bf16 on CUDA, fp32 on the CPU (where bf16 is emulated).
Result<Precision> resolve_precision(const std::string& name, bool cuda);

// Checks the options against the model; errors name the field and value.
Status validate(const TrainOptions& o, const ModelConfig& cfg);
// Data parallelism: `global_batch` splits into devices x processes equal shards of whole
// micro-batches (and devices is in [1, 64]).
Status check_devices(int devices, const TrainOptions& opt, int processes = 1);
// A step's batch: global_batch x seq_len tokens, every one inside the vocabulary.
Status check_step_batch(const Batch& batch, const TrainOptions& o, int vocab);
// Both executors' step opening: the batch checked, then StepStats with the step's 1-based
// index, its token count and its learning rate.
Result<StepStats> open_step(const Batch& batch, const TrainOptions& o, int vocab, long steps_done);
// open_step without the check, for a batch its caller has already checked (a shard of one).
StepStats step_stats_for(const Batch& batch, const TrainOptions& o, long steps_done);

// A held-out batch an executor can evaluate at once: seq_len tokens per row, a whole number of
// micro-batches, at most `max_rows` rows (Executor::eval_batch_rows()), tokens in the vocabulary.
Status check_eval_batch(const Batch& batch, const TrainOptions& o, int max_rows, int vocab);

// Non-finite numbers fail the step before its update is applied, so the weights (and the last
// checkpoint) stay as they were. The reasons name the step, the quantity and, for a gradient,
// the first unit whose gradient is not finite.
Status check_step_loss(long step, double loss);
// An evaluation whose loss is not finite (the weights hold non-finite values, or overflow).
Status check_eval_loss(const EvalStats& e);
// unit_sumsq: each unit's sum of squared gradients, in unit order.
Status check_grad_norm(long step, double norm, const std::vector<double>& unit_sumsq,
                       const std::vector<ParamSchema>& units);

class Executor {
 public:
  virtual ~Executor() = default;
  // One optimizer step on a global batch (global_batch sequences of seq_len tokens).
  virtual Result<StepStats> step(const Batch& batch) = 0;
  // Finishes any update still in flight, so the HostStore holds the latest weights.
  virtual Status sync() = 0;
  virtual HostStore& store() = 0;
  virtual long steps_done() const = 0;
  virtual void set_steps_done(long steps) = 0;  // after loading a checkpoint
  // Held-out evaluation between steps: the current weights (after every update so far) on a
  // batch of sequences, forward only, in micro-batches of TrainOptions::micro_batch, with the
  // step's own buffers (so it needs no memory the step does not). The batch passes
  // check_eval_batch with eval_batch_rows(); a non-finite loss fails it.
  virtual Result<EvalStats> evaluate(const Batch& batch) = 0;
  virtual int eval_batch_rows() const = 0;
};

// Initialises every unit's master weights from `seed` (and clears the optimizer state).
void init_weights(const ModelConfig& cfg, HostStore& store, uint64_t seed);

}  // namespace mt

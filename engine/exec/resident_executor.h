// ResidentExecutor: the reference trainer. All weights sit in host memory; each micro-batch
// runs the whole model (model_pass), gradients accumulate, then the global norm is clipped and
// AdamW updates every unit. Nothing is streamed or overlapped.
#pragma once
#include <memory>
#include <vector>

#include "engine/exec/executor.h"
#include "engine/exec/model_pass.h"
#include "engine/model/layers.h"

namespace mt {

class ResidentExecutor final : public Executor {
 public:
  static Result<std::unique_ptr<ResidentExecutor>> create(const ModelConfig& cfg, const TrainOptions& opt);

  Result<StepStats> step(const Batch& batch) override;
  Status sync() override { return Status::Ok(); }
  HostStore& store() override { return *store_; }
  long steps_done() const override { return steps_; }
  void set_steps_done(long steps) override { steps_ = steps; }

  // Mean loss of the current weights on a batch, without training (forward only).
  Result<double> evaluate(const Batch& batch);

 private:
  ResidentExecutor(const ModelConfig& cfg, const TrainOptions& opt);
  Result<double> clip_and_update(long step, float lr, StepStats& st);  // the norm; fails if not finite
  // Forward and backward of every micro-batch in the compute dtype T; the loss sum.
  template <typename T>
  Result<double> accumulate_grads(const Batch& batch, float grad_scale);
  template <typename T>
  Result<double> evaluate_in(const Batch& batch);
  // Each unit's weights in the compute dtype: the fp32 masters, or their bf16 shadows.
  template <typename T>
  std::vector<const T*> weights() const;

  ModelConfig cfg_;
  TrainOptions opt_;
  std::vector<ParamSchema> units_;
  std::unique_ptr<HostStore> store_;
  ThreadPool pool_;
  std::vector<float> inv_freq_, tied_head_grad_;
  Workspace workspace_;
  long steps_ = 0;
};

}  // namespace mt

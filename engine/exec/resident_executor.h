// ResidentExecutor: the reference trainer. All weights sit in host memory; each micro-batch
// runs the whole model (model_pass), gradients accumulate, then the global norm is clipped and
// AdamW updates every unit. Nothing is streamed or overlapped.
//
// devices: N (in-process data parallel on the CPU, the resident twin of DataParallelExecutor):
// the global batch is cut into N equal shards of whole micro-batches (device d takes sequences
// [d*G/N, (d+1)*G/N)), and N threads ("devices") each run their shard's micro-batches, summing
// their gradients from zero into their own buffers (device 0's are the store's; every other
// device has one fp32 gradient per unit, the resident analogue of device memory, and its own
// workspace). The devices' gradients are then summed into the store's in the fixed order
// ((dev 0 + dev 1) + dev 2) + ..., as the in-process communicator's reduce does; a tied
// embedding's LM-head share is summed the same way and then added to the lookup's share, as the
// streaming pipeline merges them; the loss is summed per micro-batch in global order; and the one
// clip + AdamW updates the ONE HostStore (masters and Adam state exist once, whatever N).
// Numerics: so devices: N equals the streaming executor's devices: N on the CPU backend bit for
// bit (fp32 and bf16), and differs from devices: 1 by the association of the micro-batch sum
// (fp32 rounding; data_parallel_executor.h states the bound). One process only: several
// processes (mpirun) need executor = streaming.
#pragma once
#include <memory>
#include <vector>

#include "engine/base/thread_pool.h"
#include "engine/exec/executor.h"
#include "engine/exec/model_pass.h"
#include "engine/model/layers.h"

namespace mt {

class ResidentExecutor final : public Executor {
 public:
  // devices: see above; opt.global_batch must split into `devices` shards of whole micro-batches.
  static Result<std::unique_ptr<ResidentExecutor>> create(const ModelConfig& cfg, const TrainOptions& opt,
                                                          int devices = 1);

  Result<StepStats> step(const Batch& batch) override;
  Status sync() override { return Status::Ok(); }
  HostStore& store() override { return *store_; }
  long steps_done() const override { return steps_; }
  void set_steps_done(long steps) override { steps_ = steps; }

  int devices() const { return int(devices_.size()); }
  // Host bytes of the run: the one store, and every device's gradient buffers and workspace.
  uint64_t host_bytes() const;

  // Held-out batches in micro-batches of micro_batch rows (Executor::evaluate).
  Result<EvalStats> evaluate(const Batch& batch) override;
  int eval_batch_rows() const override { return opt_.global_batch; }
  // Mean loss of the current weights on any number of sequences, one at a time (forward only).
  Result<double> mean_loss(const Batch& batch);

 private:
  // One device of devices: N: where its gradients accumulate, its workspace, and its
  // micro-batches' loss sums (in order) after a step.
  struct Device {
    std::vector<std::vector<float>> own_grads;  // devices > 0: one buffer per unit
    std::vector<float*> grads;                  // per unit: the store's (device 0) or own_grads
    std::vector<float> tied_head_grad;          // tied embeddings: the LM head's share of d(embedding)
    Workspace workspace;
    std::vector<double> loss_sums;
    std::vector<char> routed;  // per unit: an expert its micro-batches routed a token to
    double aux_loss = 0;       // its micro-batches' load-balancing losses, summed
  };

  ResidentExecutor(const ModelConfig& cfg, const TrainOptions& opt);
  Result<double> clip_and_update(long step, float lr, StepStats& st);  // the norm; fails if not finite
  // Device d's shard through the model in the compute dtype T: its gradients from zero, its loss sums.
  template <typename T>
  Status accumulate_shard(int d, const Batch& batch, float grad_scale);
  // Every device's shard, on a thread each (device 0 on the caller's); the first failure, naming its device.
  Status run_devices(const Batch& batch, float grad_scale);
  // The devices' gradients into the store's, in device order, and a tied embedding's two shares.
  void reduce_devices();
  template <typename T>
  Result<double> mean_loss_in(const Batch& batch);
  template <typename T>
  Result<EvalStats> evaluate_in(const Batch& batch);
  // Each unit's weights in the compute dtype: the fp32 masters, or their bf16 shadows.
  template <typename T>
  std::vector<const T*> weights() const;

  ModelConfig cfg_;
  TrainOptions opt_;  // global
  std::vector<ParamSchema> units_;
  std::unique_ptr<HostStore> store_;
  NumaPlacement numa_;  // the optimizer's workers and the store's nodes
  ThreadPool pool_;
  std::vector<float> inv_freq_;
  std::vector<Device> devices_;  // [0] accumulates into the store
  std::vector<char> routed_;     // per unit: an expert this step routed a token to (only they update)
  long steps_ = 0;
};

}  // namespace mt

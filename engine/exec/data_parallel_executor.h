// DataParallelExecutor: `devices: N` in one process — N streaming pipelines, one per device, over
// ONE HostStore (the leader's: weights, gradients and Adam state exist once, whatever N). Each
// step the global batch is cut into N equal shards of whole micro-batches (device d takes
// sequences [d*G/N, (d+1)*G/N)); every device runs its shard through the same units in the same
// order, each unit's gradient is reduced onto device 0 (Communicator::reduce, root 0) and only
// device 0 sends it to the host, where the one CPU optimizer updates the store.
// Why a reduce rather than a reduce-scatter: the host receives the same bytes either way, the
// optimizer needs the whole unit, and with a reduce the gradient lands in the existing
// one-copy-per-unit path (no per-device slices to reassemble); device 0's link carries the
// gradient (1/3 of a step's link traffic: weights cross twice). docs/PERF.md has the model.
// Numerics: with the in-process communicator every element of a reduced gradient is
// ((dev 0 + dev 1) + ...) in a fixed order, so a run is reproducible bit for bit, and the step's
// loss is summed per micro-batch in global order (step 1 equals devices: 1 exactly); but a
// device's own gradient sums its micro-batches from zero, so devices: N differs from devices: 1
// in the association of the micro-batch sum — fp32 rounding, a relative 1e-6 per step (tested).
// CUDA devices reduce over NCCL (its own summation order, fixed for a given size and topology),
// enqueued on each device's compute stream: no host waits; a slot is reused after the reduce
// that read it because both are on that stream (the leader's copy to the host waits for it).
#pragma once
#include <memory>
#include <vector>

#include "engine/dist/communicator.h"
#include "engine/exec/streaming_executor.h"

namespace mt {

// Several processes (nodes, `mpirun -np R`): two communicators over the same R processes — one
// for the leader's optimizer thread (each unit's gradient, summed over nodes on the host), one for
// the step loop (the loss). Every process reads the same global batch and takes its part
// (sequences [r*G/R, (r+1)*G/R)), which its devices then share; every node applies the same update
// to its own HostStore, so any node's store is the model (rank 0 writes the checkpoints).
// Sharded (shard_optimizer), each node updates only its own units (optimizer_shards.h) and the
// others receive their weights over a third communicator, `weights` (its own thread, so its own
// sequence of collectives); every node's masters are still the whole model.
struct NodeComms {
  Communicator* grads = nullptr;
  Communicator* losses = nullptr;
  Communicator* weights = nullptr;  // non-null: the optimizer is sharded
  int rank() const { return losses ? losses->rank() : 0; }
  int size() const { return losses ? losses->size() : 1; }
};

class DataParallelExecutor final : public Executor {
 public:
  // One backend per device; opt.global_batch is the global batch (a multiple of N * R micro-batches).
  // `comms`: the devices' group, rank d for backends[d] — NCCL for CUDA devices (make_nccl_comms);
  // empty: an in-process group (CPU devices, whose memory the host reads) with `copt`.
  static Result<std::unique_ptr<DataParallelExecutor>> create(const ModelConfig& cfg, const TrainOptions& opt,
                                                              const StreamingOptions& so,
                                                              std::vector<std::unique_ptr<Backend>> backends,
                                                              const CommOptions& copt = {}, NodeComms nodes = {},
                                                              std::vector<std::unique_ptr<Communicator>> comms = {});
  ~DataParallelExecutor() override;

  Result<StepStats> step(const Batch& batch) override;
  Status sync() override { return replicas_[0]->sync(); }
  HostStore& store() override { return replicas_[0]->store(); }
  long steps_done() const override { return replicas_[0]->steps_done(); }
  void set_steps_done(long steps) override;
  // On device 0 alone, once every device's step has run: the weights are the one store's.
  Result<EvalStats> evaluate(const Batch& batch) override { return replicas_[0]->evaluate(batch); }
  int eval_batch_rows() const override { return replicas_[0]->eval_batch_rows(); }

  int devices() const { return int(replicas_.size()); }
  StreamingExecutor& replica(int d) { return *replicas_[size_t(d)]; }
  // Host bytes of the whole run: the one store and every device's host staging.
  uint64_t host_bytes() const;

 private:
  DataParallelExecutor(const ModelConfig& cfg, const TrainOptions& opt) : cfg_(cfg), opt_(opt) {}
  Batch shard(const Batch& batch, int part, int parts) const;
  // The step's loss sum: every micro-batch's, over every device and node, in global order.
  Result<double> loss_sum();

  ModelConfig cfg_;
  TrainOptions opt_;  // global
  NodeComms nodes_;
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<std::unique_ptr<StreamingExecutor>> replicas_;  // [0]: the leader
};

}  // namespace mt

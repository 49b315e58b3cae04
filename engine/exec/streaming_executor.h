// StreamingExecutor: every unit's state lives in the HostStore; the device holds only K weight
// slots, gradient staging slots, the layer-input checkpoints and one micro-batch's workspace.
// Layer-major: each unit is fetched once per forward and once per backward for the whole
// global batch, every micro-batch passing through it while it is resident. Gradients go back
// to the host as each unit finishes and a CPU optimizer thread clips and updates the units
// in order 0..U-1, overlapped with the next step's forward (unit u's upload waits only for
// unit u's update). On the CPU backend it reproduces ResidentExecutor bit for bit.
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/dist/communicator.h"
#include "engine/exec/compute_timeline.h"
#include "engine/exec/executor.h"
#include "engine/model/layers.h"
#include "engine/exec/planner.h"
#include "engine/exec/streaming_pipeline.h"

namespace mt {

struct StreamingOptions {
  int slots = 2;  // K weight slots
  CheckpointPlacement placement = CheckpointPlacement::kAuto;
  uint64_t device_budget = 0;  // bytes the device may use; 0 = no limit
  uint64_t backend_bytes = 0;  // of which the backend's own buffers take this (PlanOptions::backend_bytes)
  double link_gbps = 0;        // CPU backend: emulated link bandwidth per direction
  // Update each unit as soon as its gradient lands, during backward. Faster, but only valid
  // without global-norm clipping (refused when grad_clip > 0).
  bool update_during_backward = false;
  Bf16Uploads bf16_uploads = Bf16Uploads::kShadow;  // precision bf16 only (planner.h)
  // Updates before the norm is known (planner.h; the plan says which units, within the host
  // budget). The same bits as kOff, whatever clipping does.
  Speculation speculation = Speculation::kOff;
  uint64_t host_budget = 0;        // bytes the plan may use (restore copies fit in what is left)
  double optimizer_slowdown = 1;   // benchmarks: PipelineConfig::optimizer_slowdown
  int expert_slots = 2;            // a mixture of experts: device slots experts stream through
  // The NVMe tier (engine/optim/nvme_tier.h): the decoders' and experts' Adam moments (and, with
  // nvme.masters, their fp32 masters) on local drives; off while nvme.paths is empty.
  NvmeTierOptions nvme;
  // The plan a job was admitted with (make_executor: its node's host bytes, each device's
  // bytes, its held-out set, its processes), which the executor then follows — the restore
  // copies it makes are the ones the plan counted. Empty: planned here from the options above.
  std::optional<MemoryPlan> plan;
};
// The fields the two share, one way and the other (each side's others at their defaults).
StreamingOptions streaming_options(const PlanOptions& po);
PlanOptions plan_options(const StreamingOptions& so);

class StreamingExecutor;

// Data parallelism (data_parallel_executor.h): this executor is replica `comm->rank()` of a group
// of devices that share the leader's (rank 0's) HostStore. Each replica runs its share of the
// global batch's micro-batches through the same units in the same order; a unit's gradient is
// reduced onto the leader's device (comm->reduce, root 0) and only the leader sends it to the
// host, where its optimizer, the only one, updates the shared store. The others upload from that
// store once the leader has updated each unit.
struct ReplicaOptions {
  Communicator* comm = nullptr;         // null: a lone executor
  StreamingExecutor* leader = nullptr;  // ranks > 0: whose store and updates they use
  long rows_tokens = 0;  // the embedding rows of a step come from this many tokens (the global batch)
  // The leader only: the processes (nodes) its landed gradients are all-reduced over on the host
  // (PipelineConfig::nodes), in fp32 whatever the layout.
  Communicator* nodes = nullptr;
  // With `nodes`: the Adam state sharded over them (optimizer_shards.h); this store holds m and v
  // of its own units only, and receives the others' masters from their owners over `weights`.
  Communicator* weights = nullptr;
};

class StreamingExecutor final : public Executor {
 public:
  static Result<std::unique_ptr<StreamingExecutor>> create(const ModelConfig& cfg, const TrainOptions& opt,
                                                           const StreamingOptions& so, std::unique_ptr<Backend> backend,
                                                           const ReplicaOptions& ro = {});
  static Result<std::unique_ptr<StreamingExecutor>> create_cpu(const ModelConfig& cfg, const TrainOptions& opt,
                                                               const StreamingOptions& so);
  ~StreamingExecutor() override;

  Result<StepStats> step(const Batch& batch) override;
  // A replica's step: `shard` is its part of the global batch, `rows` the global batch's
  // embedding rows (embedding_rows of all its inputs) and `counted` its counted targets, so
  // every replica's gradient is its share of the one global mean. The caller has checked the
  // batch the shard was cut from (check_step_batch).
  Result<StepStats> step_shard(const Batch& shard, EmbeddingRows rows, long counted);
  // The distinct tokens (ascending) of `inputs`: the embedding rows a step reads.
  EmbeddingRows embedding_rows(const std::vector<int32_t>& inputs);
  // After a step: its micro-batches' loss sums, in order.
  std::vector<double> micro_batch_loss_sums() const;
  Status sync() override;
  // Held-out evaluation between steps (streaming_eval.cc): forward only, layer-major, in the
  // step's own device buffers, so the device peak stays the plan. The leader (or a lone
  // executor) only.
  Result<EvalStats> evaluate(const Batch& batch) override;
  int eval_batch_rows() const override { return opt_.global_batch; }
  HostStore& store() override { return *store_; }
  Backend& backend() { return *backend_; }
  long steps_done() const override { return steps_; }
  void set_steps_done(long steps) override;

  const MemoryPlan& plan() const { return plan_; }
  // Host bytes it allocated: the HostStore and its host staging buffers (= plan().host_bytes).
  uint64_t host_bytes() const {
    return (own_store_ ? own_store_->total_bytes() : 0) + host_tied_grad_.bytes() + host_checkpoints_.bytes() + host_rows_.bytes() +
           host_loss_.bytes() + host_batch_.bytes() + host_upload_staging_.bytes() + host_offsets_.bytes() + host_recheck_.bytes() +
           host_moe_stats_.bytes();
  }
  size_t device_peak() const { return backend_->device_peak(); }
  StreamingPipeline& pipeline() { return *pipe_; }

 private:
  StreamingExecutor(const ModelConfig& cfg, const TrainOptions& opt, const StreamingOptions& so,
                    std::unique_ptr<Backend> backend, const ReplicaOptions& ro);
  Status allocate();
  static Status check_nvme_tier(const TrainOptions& opt, const StreamingOptions& so, const ReplicaOptions& ro);
  Status allocate_experts();
  // The step's uses and its last phase, in the compute dtype T (float or bf16).
  template <typename T>
  void run_uses(StepStats& st);
  // The step's loss sum, read once the head's totals have reached the host (in micro-batch
  // order, as the resident executor sums).
  double read_loss_sum();
  // The evaluation's forward over `count` micro-batches: its loss totals go to host_loss_.
  template <typename T>
  Status eval_uses(int count, const EmbeddingRows& rows);
  template <typename T>
  Status eval_moe(int layer, int count, const T* w, const T* in, T* out);
  void drain();  // waits until every stream has run what was enqueued
  void upload_batch(const Batch& batch);
  void make_spans(const Batch& batch);  // span_starts_ and spans_ of the batch's documents
  // shape_ with micro-batch m's document positions and spans (nullptr when the batch has none).
  LayerShape micro_batch_shape(int m) const;
  void fill_stats(StepStats& st);
  // The step's phases; `use` indexes the step's unit-use sequence (see streaming_pipeline.h).
  template <typename T>
  void forward_embedding(int use);
  template <typename T>
  void forward_decoder(int use, int layer);
  template <typename T>
  void head(int use, int tied_use);  // its loss totals go to host_loss_
  template <typename T>
  void backward_decoder(int use, int layer);
  // A mixture of experts (streaming_experts.cc). A MoE layer's forward: its decoder unit for
  // every micro-batch, the routing to the host, then each routed expert (uses use+1..) for every
  // micro-batch. Its backward: the decoder's forward again for every micro-batch (the experts'
  // input), each routed expert's backward, then the decoder's recompute and backward.
  template <typename T>
  void forward_moe(int use, int layer);
  template <typename T>
  void backward_moe(int use, int layer);
  // Micro-batch m's MoE state in the step's buffers (layer: which routing the host reads).
  template <typename T>
  MoeActs<T> moe_acts(int layer, int m, bool forward) const;
  int32_t* host_offsets(int layer, bool recheck) const;  // [micro-batches][E + 1] on the host
  // The routing of `layer` (its offsets) to the host, waited for, told to the pipeline; the
  // experts (indices) it routed tokens to.
  std::vector<int> receive_routing(int layer, int32_t* host, bool publish);
  void fill_moe_stats(StepStats& st);
  Status check_recomputed_routing();
  template <typename T>
  void backward_embedding(StepStats& st);  // reads no weights: not a use
  // Layer inputs x_0..x_L (x_L feeds the head): all on the device, or a ring of three device
  // buffers backed by host memory (host placement).
  template <typename T>
  T* layer_input(int l) {
    return static_cast<T*>(ckpt_[size_t(plan_.checkpoints_on_device ? l : l % 3)]);
  }
  size_t act_bytes() const { return compute_elem_bytes(opt_.precision); }
  // The LM head's scratch: in the workspace after a decoder's activations and scratch (layers.h).
  template <typename T>
  HeadScratch<T> head_scratch() const {
    return bind_head_scratch<T>(shape_, static_cast<char*>(work_) + decoder_acts_bytes<T>(shape_) +
                                            decoder_scratch_bytes<T>(shape_));
  }
  void prepare_output(int l);                  // x_l is about to be written
  void offload_layer_input(int l);             // host placement: x_l to host memory
  void fetch_layer_input(int l);               // host placement: x_l back to the device
  int acquire_grad_slot(size_t numel);  // a zeroed gradient slot
  enum class GradShare { kUnit, kTiedHead, kEmbeddingRows };  // where a gradient slot goes on the host
  void send_grads(int unit, int grad_slot, size_t numel, GradShare share);
  // Each input's index among `rows`, in row_ids_.
  void map_to_rows(const std::vector<int32_t>& inputs, const std::vector<int32_t>& rows);
  // Replicas: the gradient slot reduced onto the leader's device; false when this replica sends
  // nothing to the host (not the leader, or the group failed: then comm_error_ is set).
  bool reduce_grads(int grad_slot, size_t numel);

  ModelConfig cfg_;
  TrainOptions opt_;
  StreamingOptions so_;
  NumaPlacement numa_ = NumaPlacement::none(1);  // the optimizer's workers (allocate)
  std::vector<ParamSchema> units_;
  MemoryPlan plan_;
  ReplicaOptions ro_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<HostStore> own_store_;  // null on a replica other than the leader
  HostStore* store_ = nullptr;            // own_store_, or the leader's
  Status comm_error_;                     // the first failed collective of the step
  std::unique_ptr<StreamingPipeline> pipe_;
  // Host memory from the backend's allocator (pinned on CUDA, so copies overlap compute).
  HostBuffer host_tied_grad_;    // tied embeddings: the LM head's share of d(embedding)
  HostBuffer host_checkpoints_;  // host placement: layer inputs (L x G*T*C, compute dtype)
  HostBuffer host_rows_;          // the step's embedding rows, then their gradient (HostStaging)
  HostBuffer host_loss_;          // the head's {loss sum, counted} per micro-batch
  // The step's inputs, targets, positions and document starts, staged for their upload: a copy
  // from pageable memory would hold the host until the H2D stream's queued uploads had run.
  HostBuffer host_batch_;
  HostBuffer host_upload_staging_;  // bf16 convert uploads: one slot-sized buffer per weight slot
  EventPtr loss_landed_;          // host_loss_ holds this step's totals
  // Inputs as indices into the step's embedding rows (what the device's embedding reads), and
  // a per-token scratch map from token to row.
  std::vector<int32_t> row_ids_, row_of_token_;

  // Device regions.
  std::vector<void*> slots_, ckpt_;  // compute dtype
  std::vector<float*> grad_slots_;   // gradients accumulate in fp32 whatever the compute dtype
  std::vector<EventPtr> grad_slot_free_;
  std::vector<int> ring_holds_;            // host placement: which layer input each ring buffer holds
  std::vector<EventPtr> ring_offloaded_, ring_ready_;
  EventPtr last_offload_;
  void *dresid_ = nullptr, *work_ = nullptr;  // compute dtype; the workspace mixes dtypes (layers.h)
  float* inv_freq_ = nullptr;
  int32_t *inputs_ = nullptr, *targets_ = nullptr, *positions_ = nullptr;
  bool has_positions_ = false;  // this step's batch carries document positions
  // The same documents as spans (kernels/attention.h), per micro-batch, for kernels that take
  // ragged sequences: host starts back to back, their device copy, one DocumentSpans each
  // (count 0 where the positions are not runs of 0, 1, 2, ...).
  std::vector<int32_t> span_starts_;
  int32_t* device_span_starts_ = nullptr;
  std::vector<DocumentSpans> spans_;
  double* loss_totals_ = nullptr;  // the head writes {loss sum, counted} per micro-batch
  // A mixture of experts: each micro-batch's MoeActs (one layer's at a time), their routing
  // offsets side by side, their load-balancing statistics (over the step's layers); the expert
  // slots; on the host, every MoE layer's offsets from the forward and from the backward's
  // recompute (which must agree), and the statistics.
  void* moe_ = nullptr;
  int32_t* moe_offsets_ = nullptr;
  float* moe_stats_ = nullptr;
  std::vector<void*> expert_slots_;
  std::vector<int> moe_index_;  // per layer: its index among the MoE layers (-1: dense)
  HostBuffer host_offsets_, host_recheck_, host_moe_stats_;
  EventPtr moe_stats_landed_;
  int next_grad_slot_ = 0;

  ComputeTimeline timeline_{*backend_};  // after backend_
  LayerShape shape_;
  float grad_scale_ = 0;
  long steps_ = 0;
};

}  // namespace mt

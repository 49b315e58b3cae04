// The StreamingExecutor's two helper threads and the schedule they share.
//  * The use sequence: every unit use of a step in order (forward 0..L, head [with the
//    embedding when tied], backward L..1), each assigned a weight slot. A unit still resident
//    from its previous use is reused without a copy; otherwise the least recently used slot
//    is refilled.
//  * The uploader thread walks the sequence, filling each slot as soon as (a) the previous
//    user of that slot has released it and (b) the optimizer has finished updating the unit
//    from the previous step; it records an H2D event the compute side waits on.
//  * The optimizer thread takes each unit's gradient as its D2H copy lands, computes its sum
//    of squares, and — once all units have landed — clips by the global norm and updates the
//    units in order 0..U-1 (or, with update_during_backward, each unit as it lands). A
//    speculating unit (PipelineConfig::speculate) is updated as it lands, with clip factor 1,
//    after a restore copy of its masters and moments is taken; it is not marked updated (so
//    nothing uploads it) until the norm is known: then, if clipping scales the step, it is
//    restored from the copy and updated again with the right factor — the same bits as the
//    plain schedule either way — else it is marked at once. A step
//    whose loss or gradient norm is not finite is not applied, nor is any later step: the
//    refusal is kept and returned by the executor's next step or sync. (With
//    update_during_backward, units that landed before the non-finite one are already updated.)
//  * A follower (data parallelism: a replica other than the leader) has no gradients to land:
//    its uploader waits for the leader's updates of the shared store instead of its own.
//  * Experts (a mixture of experts) are units of their own, used right after their layer's
//    decoder unit in the forward and in the backward (inside its backward use: the decoder stays
//    resident). Which of them a step routes tokens to is known only once the layer's router has
//    run: the compute side says so (set_routing) and the uploader, which waits for it, uploads
//    only those, into a ring of expert slots taken in turn; an expert without tokens is neither
//    uploaded, nor landed, nor updated that step (as PyTorch's AdamW skips a parameter without a
//    gradient: its step count too, HostStore::adam_step). The optimizer updates in the order the
//    next forward uses the units (embedding, each decoder then its experts, head).
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/dist/communicator.h"
#include "engine/exec/compute_timeline.h"
#include "engine/optim/host_store.h"
#include "engine/optim/optimizer.h"
#include "engine/base/thread_pool.h"

namespace mt {

struct UnitUse {
  int unit = 0;
  int slot = 0;
  bool fetch = true;      // false: the unit is still resident in `slot` from an earlier use
  bool rows_only = false; // the embedding's forward: only the batch's token rows, packed
  int prev_of_slot = -1;  // the previous use of the same slot in this step (-1: none)
  bool backward = false;  // a use of the backward (after the head)
  bool tied_lm = false;   // the embedding's use by a tied LM head (taken with the head's use)
  bool expert = false;    // an expert's: its slot is an expert slot, chosen when it is uploaded
};

// Builds the use sequence for L decoder layers, K slots, tied or untied embeddings, and each
// layer's expert units (layer_experts[l], empty for a dense layer or model).
std::vector<UnitUse> build_use_sequence(int num_layers, int slots, bool tied,
                                        const std::vector<std::vector<int>>& layer_experts = {});

struct PipelineConfig {
  OptimizerConfig optimizer;
  bool update_during_backward = false;
  // The optimizer's workers and their NUMA nodes: the placement the HostStore was created with.
  NumaPlacement optimizer_placement = NumaPlacement::none(1);
  size_t embedding_width = 0;  // C: elements per embedding row
  // What the slots hold: the fp32 masters, or (bf16) the shadows the optimizer writes with them.
  Precision precision = Precision::kFp32;
  // Several processes (nodes): each landed gradient is all-reduced over them on the host, by the
  // optimizer thread, before its norm is taken, so every node applies the same update. Null: one.
  // Summed in fp32 always: a compact (bf16) gradient is widened into a staging buffer of the
  // largest unit's size, summed, and rounded back once.
  Communicator* nodes = nullptr;
  // The optimizer sharded over the nodes (optimizer_shards.h): unit u's gradient is reduced onto
  // its owner, owners[u], which alone updates it; its masters are then broadcast to the others.
  // Empty: every node updates every unit.
  std::vector<int> owners;
  // Sharded: the broadcasts of updated masters, on their own thread. Their own communicator, as
  // an owner's next step may land (and reduce) gradients while its broadcasts are still going out.
  Communicator* weights = nullptr;
  // Per unit: may update before the norm is known (speculative_units; never the embedding).
  // Empty: none. Refused (ignored) with a sharded optimizer.
  std::vector<char> speculate;
  // Speculation::kAuto: a step after one that clipped does not speculate.
  bool speculate_after_clip = true;
  // Benchmarks only: each unit's update takes this many times as long (the CPU backend's way to
  // give the optimizer the share of the step it has on a GPU host; results are unchanged).
  double optimizer_slowdown = 1;
};

// Host buffers the executor owns and the pipeline fills or reads (pinned on CUDA).
struct HostStaging {
  void* tied_grad = nullptr;  // tied embeddings only: the LM head's share of d(embedding)
  // The step's embedding rows, gathered for upload at the start of the forward; later the same
  // buffer receives their gradient at the end of the backward. The two uses never overlap: the
  // upload lands before the embedding's forward, the gradient is copied after its backward, and
  // the next gather waits for the embedding's update, which follows the scatter of its gradient.
  void* embedding_rows = nullptr;
  // bf16 convert uploads (Bf16Uploads::kConvert): slot k's weights are converted into
  // upload_staging + k * slot_numel, then copied. Null: uploads copy the store directly.
  bf16* upload_staging = nullptr;
  size_t slot_numel = 0;  // elements of the largest unit
};

// The distinct tokens of a step's inputs, ascending: the embedding rows the step reads and
// the only rows of the embedding gradient that can be non-zero.
using EmbeddingRows = std::shared_ptr<const std::vector<int32_t>>;

class StreamingPipeline {
 public:
  // expert_slots: the device slots experts are uploaded into (a mixture of experts; else empty).
  StreamingPipeline(Backend& backend, HostStore& store, const std::vector<ParamSchema>& units,
                    std::vector<void*> slots, std::vector<UnitUse> uses, const PipelineConfig& cfg,
                    const HostStaging& staging, StreamingPipeline* leader = nullptr,
                    std::vector<void*> expert_slots = {});
  ~StreamingPipeline();
  // Blocks until `unit`'s update of `step` is applied (or `stop` is set): a follower's uploader
  // waits on its leader's updates (data parallelism: one optimizer, one store).
  void wait_updated(size_t unit, long step, const std::atomic<bool>& stop);

  const std::vector<UnitUse>& uses() const { return uses_; }
  // Bytes the uses [first, last] fetch from the host.
  uint64_t fetch_bytes(int first, int last) const;
  // The use's weights on the device (an expert's: once wait_ready has returned for it).
  template <typename T>
  T* slot_of(int use) const {
    const UnitUse& u = uses_[size_t(use)];
    return static_cast<T*>(u.expert ? expert_slots_[size_t(use_slot_[size_t(use)])] : slots_[size_t(u.slot)]);
  }
  // The current step routed tokens to these experts of `layer` (units; the rest get none): the
  // compute side, once the layer's router has run in the forward. Until then the uploader waits.
  void set_routing(int layer, const std::vector<int>& routed_units);

  // step: 1-based index of the step starting; rows: its inputs' embedding rows.
  void begin_step(long step, float lr, EmbeddingRows rows);
  // Compute side: the compute stream waits (on the device) until use's weights are there; the
  // host blocks only until their upload is issued. The stall goes to the timeline.
  void wait_ready(int use, ComputeTimeline& timeline);
  void release(int use);                  // compute finished with the use's weights
  void end_step(EventPtr done);           // the step's compute is enqueued; `done` marks its end
  // A unit's gradient (or the LM head's share of a tied embedding's) is in flight to the host.
  // The embedding's own share comes as the step's rows, into staging.embedding_rows.
  void grads_sent(int unit, EventPtr landed, bool tied_part);
  // Waits until every update of every step begun so far is done; the error, if an update was
  // refused.
  Status sync();
  // Refuses the update of `step` (its loss was not finite) and of every later step. Called
  // before the step's last gradient lands, so no unit of it has been updated.
  void refuse_update(Status why);
  // The first refusal: a non-finite loss, or a non-finite gradient norm found by the optimizer
  // thread (naming the step and unit). Once set, no further update is applied.
  Status error();
  void mark_all_updated(long step);  // after loading a checkpoint at `step`
  double take_optimizer_seconds();
  // Speculated updates so far, and how many of them clipping rolled back.
  long speculated_updates() const { return speculated_total_; }
  long rolled_back_updates() const { return rolled_back_total_; }
  // The global gradient norm (before clipping) of `step`: blocks until the step's last gradient
  // has landed and the norm is summed (before the updates it scales), or the step's update is
  // refused — then NaN. A follower asks its leader, whose optimizer saw the gradients.
  double grad_norm_of(long step);
  // A pass outside the step schedule (held-out evaluation), between steps: after sync(), before
  // the next begin_step, while the uploader is idle. Copies the unit's current weights (with
  // `rows`, only those rows of the embedding, packed) into `slot` once `after` has run (the
  // slot's last reader); returns the copy's event. The caller's pass must have finished on the
  // device before the next step begins: that step's uploads refill the slots without waiting.
  Result<EventPtr> upload_between_steps(int slot, int unit, const std::vector<int32_t>* rows, const EventPtr& after);
  // The same into expert slot `slot` (an expert unit).
  Result<EventPtr> upload_expert_between_steps(int slot, int unit, const EventPtr& after);

 private:
  void uploader_loop();
  void optimizer_loop();
  void update_phase(long step, float lr);
  // Sharded: updates this node's units while the broadcaster thread sends (or receives) every
  // unit's masters in unit order, each as soon as its owner has updated it.
  void update_shards(long step, float lr, float clip);
  void broadcaster_loop();
  void broadcast_updates(long step);
  void mark_updated(size_t u, long step);
  void publish_norm(long step, double norm);  // grad_norm_of(step) answers `norm`
  Status sum_over_nodes(size_t u);  // the unit's gradient summed over the nodes (onto its owner)
  bool owns(size_t u) const { return cfg_.owners.empty() || cfg_.owners[u] == cfg_.nodes->rank(); }
  void update_unit(size_t u, long step, float lr, float clip);
  void adamw(size_t u, long step, float lr, float clip);  // the update itself, not marked
  cpu::AdamWParams adamw_params(long step, float lr, float clip) const;
  // Speculation (see above): the copy, then the update with factor 1; at the norm, keep or redo.
  void speculate_unit(size_t u, long step, float lr);
  void copy_restore(size_t u, bool save);  // the unit's state into its restore buffer, or back
  void update_embedding(long step, float lr, float clip);  // the next step's rows first
  void update_rows(const std::vector<int32_t>& rows, std::vector<char>& done, long step, float lr, float clip);
  void settle_speculation(long step, float lr, float clip);  // clip < 0: the step was refused
  bool speculating(size_t u, long step) const { return speculated_at_[u] == step; }
  void skip_updates(long step);              // marks every unit done at `step` without updating
  bool refuse_if(const Status& why);         // records `why` (if not ok): true when updates are refused
  // One upload into `slot` on the H2D stream, after `after`: the unit, or `rows` of the embedding.
  EventPtr issue_upload(int slot, size_t unit, const std::vector<int32_t>* rows, const EventPtr& after);
  // An expert use in the uploader (lock held): waits for its layer's routing; uploads the expert
  // into the next expert slot, or leaves it (use_slot_ -1) when it received no token.
  void upload_expert(size_t i, long s, std::unique_lock<std::mutex>& l);
  Status check_idle();  // no step in flight (uploads between steps)
  // Mixture of experts, per step (guarded by mu_): which units the step routed tokens to
  // (non-experts always), the layers whose routing is known, and the landings it expects.
  struct StepRouting {
    std::vector<char> routed, layer_known;
    int landings = 0;
  };
  StepRouting& routing_of(long step);  // created on first use (lock held)
  bool routed(long step, size_t u);    // lock held
  bool is_routed(long step, size_t u);  // takes the lock
  void clear_unrouted(long step);       // the unrouted experts' sums of squares: 0
  void upload_embedding_rows(void* slot, const std::vector<int32_t>& rows);
  size_t elem_bytes() const;                  // of one uploaded weight
  const void* weights_of(size_t unit) const;  // what a unit's upload copies
  // Convert uploads: the unit's masters rounded to bf16 into slot k's staging, once the previous
  // copy out of it has run; returns the staging.
  const void* convert_for_upload(int slot, size_t unit);
  void scatter_embedding_grad(const EmbeddingRows& rows);

  Backend& backend_;
  HostStore& store_;
  StreamingPipeline* leader_;  // data parallelism: whose updates the uploads wait for (null: its own)
  std::atomic<bool> stopping_{false};
  const std::vector<ParamSchema>& units_;
  std::vector<void*> slots_;
  std::vector<void*> expert_slots_;
  std::vector<UnitUse> uses_;
  std::vector<size_t> update_order_;  // units in the order the next forward uses them
  // Experts (guarded by mu_): per use, its expert slot this step (-1: not uploaded); per expert
  // slot, its last use this step (-1: none); the slot the next upload takes.
  std::vector<int> use_slot_, expert_slot_last_;
  int next_expert_slot_ = 0;
  std::map<long, StepRouting> routing_;
  PipelineConfig cfg_;
  HostStaging staging_;
  ThreadPool pool_;
  EventPtr rows_uploaded_;                // the last copy out of staging_.embedding_rows
  std::vector<EventPtr> staged_;          // convert uploads: per slot, the last copy out of its staging
  EmbeddingRows scattered_;  // untied: the rows the last scatter wrote (null: clear every row)

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  long step_ = 0;           // step the compute side is in (or last began)
  long uploaded_step_ = 0;  // last step whose uploads the uploader has issued
  float lr_ = 0;
  EmbeddingRows rows_;      // of the step the compute side is in
  std::vector<EventPtr> ready_, released_;
  std::vector<double> opt_ready_time_;   // per use: when the unit's update was available
  EventPtr prev_step_done_;
  std::vector<long> updated_;            // per unit: last step whose update is applied
  // Speculation (optimizer thread only): per unit, the restore copy (masters, then m and v in
  // the store's layout) and the step it speculated at (0: none pending).
  std::vector<std::unique_ptr<char[]>> restore_;
  std::vector<long> speculated_at_;
  bool last_step_clipped_ = false;
  long rows_ready_ = 0;  // the last step whose update of the next step's embedding rows is done (mu_)
  std::atomic<long> speculated_total_{0}, rolled_back_total_{0};
  struct Landing {  // a gradient in flight to the host
    int unit;
    EventPtr event;
    bool tied_part;
    long step;
    float lr;
    EmbeddingRows rows;
  };
  void land(const Landing& g);  // the optimizer's work on one landed gradient
  std::deque<Landing> landings_;
  std::vector<double> sumsq_;
  std::vector<float> node_grad_;  // compact layout with nodes: the fp32 staging of one unit's sum
  int landed_ = 0;
  double optimizer_seconds_ = 0;
  long norm_step_ = 0;  // the latest step whose norm is known (guarded by mu_)
  double norm_ = 0;
  Status error_;  // guarded by mu_
  long broadcast_step_ = 0;  // sharded: the latest step whose updated weights go out
  std::thread uploader_, optimizer_, broadcaster_;
};

}  // namespace mt

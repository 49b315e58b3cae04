// EngineStats: plain numbers the engine reports per step and in total. The server adapts
// them to Prometheus, the bench to JSON; the engine itself knows neither.
#pragma once
#include <cstdint>
#include <vector>

namespace mt {

struct StepStats {
  long step = 0;                 // 1-based index of the optimizer step just taken
  double loss = 0;               // mean loss per counted token of the global batch
  long tokens = 0;               // tokens processed (inputs) in the step
  // Streaming: times on the device streams' own clocks (Backend::elapsed, ComputeTimeline), not
  // the enqueueing host thread's; the same meaning on the CPU and CUDA backends.
  double step_seconds = 0;       // the step: its start to the end of its compute
  float lr = 0;                  // the learning rate this step's update applied
  double grad_norm = 0;          // global gradient norm before clipping (this step's own)
  bool clipped = false;          // the norm exceeded grad_clip: the update was scaled down
  uint64_t h2d_bytes = 0;        // host -> device traffic
  uint64_t d2h_bytes = 0;        // device -> host traffic
  double h2d_seconds = 0;        // time the H2D copy engine was busy
  double d2h_seconds = 0;
  double compute_seconds = 0;    // time the compute stream was busy (its waits excluded)
  // The step's critical path under exact clipping (docs/PERF.md, "Why overlap is bounded"):
  // every weight read before the LM head can start crosses the link after the previous step's
  // last gradient has landed, and that last gradient (the embedding's) is copied after the
  // last compute.
  double forward_compute_seconds = 0;  // compute before the LM head
  uint64_t forward_h2d_bytes = 0;      // weights fetched for the forward and the LM head
  uint64_t last_grad_bytes = 0;        // the embedding's gradient
  long embedding_rows = 0;             // distinct input tokens: the embedding rows moved each way
  // The compute stream idled: for weights, layer inputs, a free gradient slot or the batch to
  // arrive (or for the host to enqueue work); optimizer_wait is the part the host spent waiting
  // for an update of the previous step before it could issue the upload.
  double copy_wait_seconds = 0;
  double optimizer_wait_seconds = 0;
  double optimizer_seconds = 0;  // CPU time spent in norm + AdamW for this step's updates
  uint64_t device_peak_bytes = 0;
  // Set by the job runner for sources that pack or pad examples: real tokens / slots over the
  // batches this run has trained on (< 0: every slot is a real token).
  double packing_efficiency = -1;
  // A mixture of experts: the load-balancing loss (the mean over micro-batches, before its
  // coefficient; -1: a dense model), the experts the step routed tokens to (and so uploaded,
  // updated) of all of them, their bytes moved to the device against what uploading every
  // expert for the forward and the backward would have moved, and per MoE layer the load of
  // its busiest expert over the mean (tokens routed; 1 = perfectly balanced).
  double aux_loss = -1;
  long experts_routed = 0, experts_total = 0;
  uint64_t expert_h2d_bytes = 0, dense_expert_h2d_bytes = 0;
  std::vector<double> expert_load;
  bool is_moe() const { return experts_total > 0; }  // aux_loss may be NaN when the run diverges
  double stall_seconds() const { return copy_wait_seconds + optimizer_wait_seconds; }
  double tokens_per_second() const { return step_seconds > 0 ? double(tokens) / step_seconds : 0; }
  // Link bandwidth while each copy engine was busy, bytes/s (0 when it did not copy).
  double h2d_bandwidth() const { return h2d_seconds > 0 ? double(h2d_bytes) / h2d_seconds : 0; }
  double d2h_bandwidth() const { return d2h_seconds > 0 ? double(d2h_bytes) / d2h_seconds : 0; }
};

// A forward-only pass over held-out sequences (Executor::evaluate): no gradient, no update.
struct EvalStats {
  double loss_sum = 0;   // over the counted targets, summed per micro-batch in order
  long counted = 0;      // targets that count (>= 0)
  long tokens = 0;       // input slots evaluated (padding rows included)
  double seconds = 0;    // streaming: on the compute stream's clock; resident: wall time
  uint64_t h2d_bytes = 0;  // weights and tokens the pass moved to the device
  double loss() const { return counted > 0 ? loss_sum / double(counted) : 0.0; }
  void add(const EvalStats& o) {
    loss_sum += o.loss_sum;
    counted += o.counted;
    tokens += o.tokens;
    seconds += o.seconds;
    h2d_bytes += o.h2d_bytes;
  }
};

struct EngineTotals {
  long steps = 0;
  uint64_t tokens = 0, h2d_bytes = 0, d2h_bytes = 0;
  double stall_seconds = 0, compute_seconds = 0, optimizer_seconds = 0;
  void add(const StepStats& s) {
    ++steps;
    tokens += uint64_t(s.tokens);
    h2d_bytes += s.h2d_bytes;
    d2h_bytes += s.d2h_bytes;
    stall_seconds += s.stall_seconds();
    compute_seconds += s.compute_seconds;
    optimizer_seconds += s.optimizer_seconds;
  }
};

}  // namespace mt

// The memory planner: for a model, training options and a backend, the host and device bytes a
// run will use, by kind, and whether they fit the budgets. Computed from shapes alone — it never
// allocates — so plans for 120B models are instant. The streaming executor allocates exactly
// what the plan says (it plans its own allocations with this function): weights and activations
// on the device in the compute dtype (fp32 or bf16), gradients in fp32; with bf16, the host
// store adds the bf16 shadow the uploads copy. Byte counts are overflow-checked: a
// shape whose sizes do not fit 64 bits is refused, never wrapped.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/exec/executor.h"
#include "engine/model/layers.h"
#include "engine/base/json.h"
#include "engine/optim/nvme_tier.h"

namespace mt {

enum class CheckpointPlacement { kAuto, kDevice, kHost };

// In bf16, the weights each upload copies: the HostStore's bf16 shadow, which the fused AdamW
// writes as it updates each unit (+2 host bytes per parameter, +2 bytes of optimizer writes), or
// a conversion of the fp32 masters by the uploader thread into pinned staging (no shadow; K
// slot-sized staging buffers; 6 bytes of CPU traffic per parameter and upload, on the upload's
// critical path). docs/PERF.md measures both; the shadow is the default.
enum class Bf16Uploads { kShadow, kConvert };
Result<Bf16Uploads> parse_bf16_uploads(const std::string& name);
// Whether a streaming run's HostStore keeps the bf16 shadow (bf16 compute, shadow uploads).
inline bool keeps_bf16_shadow(Precision p, Bf16Uploads u) { return p == Precision::kBf16 && u == Bf16Uploads::kShadow; }
Result<CheckpointPlacement> parse_checkpoint_placement(const std::string& name);

// Speculative updates (streaming_pipeline.h): a unit's AdamW runs as soon as its gradient lands,
// before the step's global norm is known, keeping a restore copy of its masters and moments in
// case clipping then scales the step (restored and updated again: the same bits as waiting).
//  kOff: today's schedule — every update after the last gradient.
//  kOn: every unit whose restore copy fits the host budget, every step.
//  kAuto: as kOn, but a step speculates only when the previous one did not clip (clipping comes
//    in runs: early training clips every step, later rarely), so a clipping run costs no rollbacks.
// With grad_clip 0 (or speculation not off) no copy is needed: each unit updates as it lands.
enum class Speculation { kOff, kAuto, kOn };
Result<Speculation> parse_speculation(const std::string& name);  // "off" | "auto" | "on"
const char* speculation_name(Speculation s);
// The units that speculate when `count` of them may: decoders 1.., then the head (whose
// updates the next forward needs first); never the embedding, whose gradient lands last.
std::vector<int> speculative_units(int num_layers, int count);

struct PlanOptions {
  int slots = 2;  // K weight slots on the device
  CheckpointPlacement placement = CheckpointPlacement::kAuto;
  uint64_t host_budget = 0;         // bytes; 0 = unlimited
  uint64_t device_budget = 0;       // bytes; 0 = unlimited
  // Device bytes the backend allocates outside the executor's arena (the CUDA backend's library
  // workspace, staging and op scratch: cuda_fixed_device_bytes); counted against the budget.
  uint64_t backend_bytes = 0;
  // bf16 only: where the bf16 weights that cross the link come from (Bf16Uploads).
  Bf16Uploads bf16_uploads = Bf16Uploads::kShadow;
  // devices: N in one process (DataParallelExecutor): device bytes are per device, for its share
  // (global_batch / N) of the step; host bytes are for the node — the HostStore once, whatever
  // N, plus each device's staging of the step's embedding rows.
  int devices = 1;
  // Processes (nodes) under mpirun, each with its own HostStore. Sharded, each holds the Adam
  // state of its own units only (optimizer_shards.h): host bytes are the largest node's.
  int processes = 1;
  bool shard_optimizer = false;
  Speculation speculation = Speculation::kOff;
  // Host bytes of a job's held-out set (engine/job/held_out.h), read once and kept for its
  // evaluations, which run in the step's own device buffers (no device bytes of their own).
  uint64_t eval_set_bytes = 0;
  // The CPU backend: each device's bytes are host memory too (its arena is malloc'ed), counted
  // in host_bytes as "cpu_devices" so that the host budget holds the whole process.
  bool devices_on_host = false;
  // A mixture of experts: the device slots experts stream through (whatever a step routes, the
  // device holds this many: every routing fits the same plan, and more routed experts cost link
  // time, not memory).
  int expert_slots = 2;
  // The NVMe tier (engine/optim/nvme_tier.h; off while nvme.paths is empty), and what its I/O
  // is judged by: the drives' bandwidth together (GB/s, each way; 0: not known) and the model
  // TFLOP/s the device sustains (0: kPlanDeviceTflops), which set the step's compute time.
  NvmeTierOptions nvme;
  double nvme_gbps = 0;
  double device_tflops = 0;
};

// The model TFLOP/s a plan assumes for the step's compute when told none: the published
// MegaTrain's 7B step on one H100 (~272; an H200 does more), so the bandwidth a plan asks of the
// drives errs high.
constexpr double kPlanDeviceTflops = 272;

// The NVMe tier's share of a plan.
struct NvmePlan {
  bool on = false;
  int paths = 0;
  bool masters = false;              // the fp32 masters on the drives too
  int window = 0;                    // units in host memory at once
  uint64_t drive_bytes = 0;          // on the drives, all paths
  uint64_t drive_bytes_per_path = 0; // on the fullest path
  uint64_t window_bytes = 0;         // in host memory (host kind nvme_window)
  // Read and written per step: every tiered unit in and out once (a mixture of experts: at most).
  uint64_t io_bytes_per_step = 0;
  double device_tflops = 0;          // what the step's compute time assumes
  double step_compute_seconds = 0;   // the step's model FLOPs at device_tflops
  double needed_gbps = 0;            // io_bytes_per_step / step_compute_seconds: the drives' bandwidth it needs
  double drive_gbps = 0;             // PlanOptions::nvme_gbps (0: not known)
  bool hides = false;                // drive_gbps >= needed_gbps
  std::string verdict;               // in words, with the numbers
};

struct MemoryPlan {
  int64_t params = 0;
  int64_t active_params = 0;  // per token (a mixture of experts: its top_k experts'; else params)
  uint64_t host_bytes = 0;
  double host_bytes_per_param = 0;
  int devices = 1;  // device_bytes and device_by_kind are per device; host bytes for all of them
  int processes = 1;             // host bytes are per process (node)
  bool shard_optimizer = false;  // and, sharded, the largest process's
  std::vector<std::pair<std::string, uint64_t>> host_by_kind;    // master, grad, adam_m, adam_v[, bf16_shadow], embedding_rows, loss_totals, tied_head_grad, node_grad_staging, checkpoints, eval_set, moe_routing
  uint64_t device_bytes = 0;  // the arena plus the backend's own buffers
  uint64_t arena_bytes = 0;   // what the executor reserves: device_bytes less `backend`
  std::vector<std::pair<std::string, uint64_t>> device_by_kind;  // weight_slots, grad_slots, checkpoints, residual_grads, attention_state, chunk_workspace[, expert_slots, moe_state][, backend]
  bool checkpoints_on_device = true;
  bool fits = true;
  std::string reason;  // why it does not fit, with the numbers

  Precision precision = Precision::kFp32;
  // Sizes the streaming executor allocates from (device arena regions).
  size_t slot_numel = 0;        // elements of the largest streamed unit (but the experts)
  size_t expert_numel = 0;      // elements of the largest expert (a mixture of experts; else 0)
  int expert_slots = 0;         // expert slots on the device
  size_t checkpoint_numel = 0;  // elements per layer input (whole global batch): G*T*C
  size_t workspace_bytes = 0;   // one micro-batch: acts + scratch + head scratch (layers.h)
  WorkspaceSplit workspace_split;  // the same bytes by what they grow with: tokens or the chunk
  int token_chunk = 0;          // tokens per chunk the executor runs (LayerShape); 0 = unchunked
  // Units whose update may run before the norm is known (speculative_units(L, n)): with
  // grad_clip > 0 each has a restore copy (host kind restore_copies); with grad_clip 0 every
  // unit updates as it lands and needs none. `speculation` says which, and why not more.
  int speculative_units = 0;
  bool update_as_landed = false;  // grad_clip 0 with speculation on: no restore copies at all
  std::string speculation;
  NvmePlan nvme;
};

// The smallest token chunk the planner picks by itself (a spec may ask for less).
constexpr int kMinTokenChunk = 128;

Result<MemoryPlan> plan_memory(const ModelConfig& cfg, const TrainOptions& opt, const PlanOptions& popt);
// The host staging of one step's batch (its plan's batch_staging, a streaming executor's
// allocation): inputs, targets and positions (an int32 a token each) and the document starts
// (at most a token's and a micro-batch's each).
uint64_t batch_staging_bytes(const TrainOptions& o);
Json memory_plan_to_json(const MemoryPlan& p);
std::string format_bytes(uint64_t bytes);  // "1.50 GiB"

}  // namespace mt

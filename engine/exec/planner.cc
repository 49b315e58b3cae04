#include "engine/exec/planner.h"

#include <algorithm>
#include <cstdio>

#include "engine/backend/backend.h"
#include "engine/base/checked_math.h"
#include "engine/optim/host_store.h"
#include "engine/optim/optimizer_shards.h"
#include "engine/model/layers.h"
#include "engine/model/param_schema.h"

namespace mt {

Result<CheckpointPlacement> parse_checkpoint_placement(const std::string& name) {
  if (name == "auto") return CheckpointPlacement::kAuto;
  if (name == "device") return CheckpointPlacement::kDevice;
  if (name == "host") return CheckpointPlacement::kHost;
  return invalid_argument("checkpoint_placement = '" + name + "' is not one of auto, device, host");
}

Result<Bf16Uploads> parse_bf16_uploads(const std::string& name) {
  if (name == "shadow") return Bf16Uploads::kShadow;
  if (name == "convert") return Bf16Uploads::kConvert;
  return invalid_argument("bf16_uploads = '" + name + "' is not one of shadow, convert");
}

Result<Speculation> parse_speculation(const std::string& name) {
  if (name == "off") return Speculation::kOff;
  if (name == "auto") return Speculation::kAuto;
  if (name == "on") return Speculation::kOn;
  return invalid_argument("speculative_updates = '" + name + "' is not one of off, auto, on");
}

const char* speculation_name(Speculation s) {
  return s == Speculation::kOff ? "off" : s == Speculation::kAuto ? "auto" : "on";
}

std::vector<int> speculative_units(int num_layers, int count) {
  std::vector<int> out;
  for (int u = 1; u <= num_layers + 1 && int(out.size()) < count; ++u) out.push_back(u);
  return out;
}

std::string format_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(b);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

namespace {

// Every arena region is rounded up to the DeviceArena's alignment, so the plan is never below
// what the executor's allocations take.
uint64_t aligned(uint64_t bytes) { return sat_mul(sat_add(bytes, DeviceArena::kAlign - 1) / DeviceArena::kAlign, DeviceArena::kAlign); }

// The LM head's {loss sum, counted} per micro-batch, written on the device, read on the host.
uint64_t loss_totals_bytes(const TrainOptions& o) { return uint64_t(o.global_batch / o.micro_batch) * 2 * sizeof(double); }

uint64_t sum(const std::vector<std::pair<std::string, uint64_t>>& kinds) {
  uint64_t s = 0;
  for (const auto& [k, b] : kinds) s = sat_add(s, b);
  return s;
}

// Device regions for a placement (the arena's, then the backend's own buffers);
// checkpoints_on_device picks the layer-input storage.
std::vector<std::pair<std::string, uint64_t>> device_kinds(const MemoryPlan& p, const ModelConfig& c,
                                                           const TrainOptions& o, const PlanOptions& po,
                                                           bool on_device) {
  const uint64_t e = compute_elem_bytes(o.precision), tokens = sat_mul(uint64_t(o.global_batch), uint64_t(o.seq_len));
  const uint64_t layer_io = aligned(sat_mul(tokens, uint64_t(c.hidden_size), e));
  const uint64_t ckpt_buffers = on_device ? uint64_t(c.num_layers) + 1 : 3;  // all inputs, or a ring of 3
  // The layer workspace by what it grows with (layers.h WorkspaceSplit): attention's state and
  // the batch's inputs, targets, document positions and document starts (at most one per token
  // and one end per micro-batch) grow with the tokens; the chunk's workspace with token_chunk
  // (+ the LM head's loss totals, the RoPE frequencies).
  const uint64_t micro_batches = uint64_t(o.global_batch / o.micro_batch);
  const uint64_t attention_state = sat_add(sat_add(p.workspace_split.sequence, aligned(sat_mul(tokens, 12))),
                                           aligned(sat_mul(sat_add(tokens, micro_batches), 4)));
  const uint64_t chunk_workspace = sat_add(aligned(p.workspace_split.chunk),
                                           aligned(loss_totals_bytes(o)) + aligned(uint64_t(c.head_dim) * 2));
  const uint64_t grad_numel = std::max(p.slot_numel, p.expert_numel);
  std::vector<std::pair<std::string, uint64_t>> kinds = {{"weight_slots", sat_mul(uint64_t(po.slots), aligned(sat_mul(p.slot_numel, e)))},
                                                         {"grad_slots", sat_mul(2, aligned(sat_mul(grad_numel, 4)))},
                                                         {"checkpoints", sat_mul(ckpt_buffers, layer_io)},
                                                         {"residual_grads", layer_io},
                                                         {"attention_state", attention_state},
                                                         {"chunk_workspace", chunk_workspace}};
  if (c.has_experts()) {  // streaming_experts.cc: the expert slots; each micro-batch's MoE state, offsets, statistics
    const uint64_t E = uint64_t(c.moe.num_experts);
    LayerShape s{&c, o.micro_batch, o.seq_len, nullptr, o.head_chunk, p.token_chunk};
    const uint64_t state = o.precision == Precision::kBf16 ? moe_acts_bytes<bf16>(s) : moe_acts_bytes<float>(s);
    kinds.push_back({"expert_slots", sat_mul(uint64_t(p.expert_slots), aligned(sat_mul(p.expert_numel, e)))});
    kinds.push_back({"moe_state", sat_add(aligned(sat_mul(micro_batches, state)),
                                          aligned(sat_mul(micro_batches, E + 1, 4)) + aligned(sat_mul(micro_batches, 2 * E, 4)))});
  }
  if (po.backend_bytes) kinds.push_back({"backend", po.backend_bytes});  // outside the arena
  return kinds;
}

// Sharded over processes: the units whose Adam state the most loaded process holds. Else all.
MomentUnits largest_moment_share(const std::vector<ParamSchema>& units, const PlanOptions& po) {
  if (!po.shard_optimizer || po.processes <= 1) return {};
  const std::vector<int> owners = optimizer_shard_owners(units, po.processes);
  std::vector<uint64_t> load(size_t(po.processes), 0);
  for (size_t u = 0; u < units.size(); ++u) load[size_t(owners[u])] += units[u].numel;
  return moments_of_rank(owners, int(std::max_element(load.begin(), load.end()) - load.begin()));
}

// Host: per-parameter state as the HostStore lays it out, the staging of the step's embedding
// rows (up, then their gradient down), and the LM head's share of a tied embedding gradient.
// `largest`: the elements of the largest unit (MemoryPlan::slot_numel).
std::vector<std::pair<std::string, uint64_t>> host_kinds(const std::vector<ParamSchema>& units, size_t largest,
                                                         const ModelConfig& c, const TrainOptions& o,
                                                         const PlanOptions& po) {
  const bool shadow = keeps_bf16_shadow(o.precision, po.bf16_uploads);
  const NvmeTierOptions* tier = po.nvme.paths.empty() ? nullptr : &po.nvme;
  const HostStoreBytes sb = host_store_bytes(units, o.layout, shadow, largest_moment_share(units, po), tier);
  std::vector<std::pair<std::string, uint64_t>> kinds = {
      {"master", sb.master}, {"grad", sb.grad}, {"adam_m", sb.m}, {"adam_v", sb.v}};
  if (sb.shadow) kinds.push_back({"bf16_shadow", sb.shadow});  // what bf16 uploads copy
  if (tier)  // the tier's window of units read ahead and written back
    kinds.push_back({"nvme_window", sat_mul(uint64_t(po.nvme.window),
                                            nvme_tier_layout(po.nvme, nvme_unit_numel(units), state_elem_bytes(o.layout)).largest)});
  const uint64_t tokens = sat_mul(uint64_t(o.global_batch), uint64_t(o.seq_len));
  const uint64_t max_rows = std::min<uint64_t>(uint64_t(c.vocab_size), tokens);
  // Rows of the global batch, staged by every device (the leader's also receives their gradient).
  kinds.push_back({"embedding_rows", sat_mul(max_rows, uint64_t(c.hidden_size), 4, uint64_t(std::max(po.devices, 1)))});
  kinds.push_back({"loss_totals", loss_totals_bytes(o)});
  kinds.push_back({"batch_staging", batch_staging_bytes(o)});
  if (c.tie_word_embeddings) kinds.push_back({"tied_head_grad", sat_mul(state_elem_bytes(o.layout), units[0].numel)});
  if (po.processes > 1 && o.layout == MemoryLayout::kCompact)  // each unit's bf16 gradient summed in fp32
    kinds.push_back({"node_grad_staging", sat_mul(uint64_t(largest), 4)});
  if (o.precision == Precision::kBf16 && !shadow)  // convert uploads: pinned staging per slot
    kinds.push_back({"upload_staging", sat_mul(uint64_t(po.slots), largest, sizeof(bf16))});
  if (c.has_experts()) {  // every MoE layer's routing offsets twice (forward, recompute); the statistics
    const uint64_t micro_batches = uint64_t(o.global_batch / o.micro_batch), E = uint64_t(c.moe.num_experts);
    kinds.push_back({"moe_routing", sat_add(sat_mul(2, uint64_t(c.num_moe_layers()), micro_batches, (E + 1) * 4),
                                            sat_mul(micro_batches, 2 * E, 4))});
  }
  return kinds;
}

// A speculated unit's restore copy: its fp32 masters and both moments in the store's layout (the
// bf16 shadow is rewritten by the repeated update, so it needs none).
uint64_t restore_bytes(const ParamSchema& u, MemoryLayout layout) {
  return sat_mul(u.numel, sat_add(sizeof(float), sat_mul(2, state_elem_bytes(layout))));
}

// Which units speculate, within what the host budget leaves after the rest of the plan.
void plan_speculation(MemoryPlan& p, const std::vector<ParamSchema>& units, const TrainOptions& o,
                      const PlanOptions& po) {
  const int L = int(std::count_if(units.begin(), units.end(), [](const ParamSchema& u) { return u.kind == UnitKind::kDecoder; }));
  if (po.nvme.grad_window > 0 && !po.nvme.paths.empty()) {
    p.update_as_landed = true;
    p.speculation = "every unit updates as its gradient lands (grad_clip 0), its gradient in one of the NVMe tier's " +
                    std::to_string(po.nvme.grad_window) + " gradient buffers";
    return;
  }
  if (po.speculation == Speculation::kOff) {
    p.speculation = "off: every update after the step's last gradient";
    return;
  }
  if (p.shard_optimizer) {
    p.speculation = "off: the sharded optimizer updates after the norm is summed over the processes";
    return;
  }
  if (o.optimizer.grad_clip <= 0) {
    p.speculative_units = L + 1;
    p.update_as_landed = true;
    p.speculation = "every unit updates as its gradient lands (grad_clip 0: nothing to restore)";
    return;
  }
  uint64_t copies = 0;
  int n = 0;
  for (int u : speculative_units(L, L + 1)) {
    const uint64_t b = restore_bytes(units[size_t(u)], o.layout);
    if (po.host_budget && sat_add(sat_add(p.host_bytes, copies), b) > po.host_budget) break;
    copies = sat_add(copies, b), ++n;
  }
  p.speculative_units = n;
  if (copies) p.host_by_kind.push_back({"restore_copies", copies});
  p.host_bytes = sat_add(p.host_bytes, copies);
  p.speculation = std::to_string(n) + " of " + std::to_string(L + 1) + " units speculate (" + speculation_name(po.speculation) +
                  ", restore copies " + format_bytes(copies) + ")" +
                  (n < L + 1 ? "; the host budget leaves no room for the others' copies" : "");
}

// The NVMe tier: its drives' bytes, its I/O per step, and whether the drives keep up with the
// step's compute at the assumed TFLOP/s (the I/O overlaps the next forward and the backward).
NvmePlan plan_nvme(const std::vector<ParamSchema>& units, const ModelConfig& c, const TrainOptions& o,
                   const PlanOptions& po) {
  NvmePlan n;
  if (po.nvme.paths.empty()) return n;
  const NvmeLayout l = nvme_tier_layout(po.nvme, nvme_unit_numel(units), state_elem_bytes(o.layout));
  n.on = true;
  n.paths = int(po.nvme.paths.size());
  n.masters = po.nvme.masters;
  n.window = po.nvme.window;
  n.drive_bytes = l.total();
  n.drive_bytes_per_path = *std::max_element(l.file_bytes.begin(), l.file_bytes.end());
  n.window_bytes = sat_mul(uint64_t(po.nvme.window), l.largest);
  n.io_bytes_per_step = sat_mul(2, n.drive_bytes);
  n.device_tflops = po.device_tflops > 0 ? po.device_tflops : kPlanDeviceTflops;
  // This node's tokens (each process its own drives) over its devices.
  const double tokens = double(o.global_batch) * double(o.seq_len) / double(po.processes);
  n.step_compute_seconds = model_flops_per_token(c, o.seq_len) * tokens / (n.device_tflops * 1e12 * po.devices);
  n.needed_gbps = double(n.io_bytes_per_step) / n.step_compute_seconds / 1e9;
  n.drive_gbps = po.nvme_gbps;
  n.hides = n.drive_gbps > 0 && n.drive_gbps >= n.needed_gbps;
  char buf[320];
  std::snprintf(buf, sizeof buf, "%s of I/O a step (%s of state read and written back) over a %.1f s step at %.0f TFLOP/s "
                "needs %.1f GB/s of the drives", format_bytes(n.io_bytes_per_step).c_str(), format_bytes(n.drive_bytes).c_str(),
                n.step_compute_seconds, n.device_tflops, n.needed_gbps);
  n.verdict = buf;
  if (n.drive_gbps > 0) {
    std::snprintf(buf, sizeof buf, "; at %.1f GB/s it %s", n.drive_gbps,
                  n.hides ? "hides under the compute" : "does not hide: the step waits for the drives");
    n.verdict += buf;
  }
  return n;
}

std::string budget_reason(const char* what, uint64_t need, uint64_t budget) {
  return std::string(what) + " memory: needs " + format_bytes(need) + " (" + std::to_string(need) + " bytes), budget " +
         format_bytes(budget) + " (" + std::to_string(budget) + " bytes)";
}

// One micro-batch's workspace (a decoder's activations and backward scratch, the head's scratch)
// by what it grows with; its total is what the executor binds (layers.h).
WorkspaceSplit workspace_split(const ModelConfig& c, const TrainOptions& o, int token_chunk) {
  LayerShape s{&c, o.micro_batch, o.seq_len, nullptr, o.head_chunk, token_chunk};
  return o.precision == Precision::kBf16 ? layer_workspace_split<bf16>(s) : layer_workspace_split<float>(s);
}

}  // namespace

uint64_t batch_staging_bytes(const TrainOptions& o) {
  const uint64_t tokens = sat_mul(uint64_t(o.global_batch), uint64_t(o.seq_len));
  return sat_mul(sat_add(sat_mul(4, tokens), uint64_t(o.global_batch / o.micro_batch)), sizeof(int32_t));
}

Result<MemoryPlan> plan_memory(const ModelConfig& c, const TrainOptions& global, const PlanOptions& po) {
  MT_RETURN_IF_ERROR(validate(global, c));
  if (po.slots < 2) return invalid_argument("slots = " + std::to_string(po.slots) + " must be >= 2");
  if (po.processes < 1) return invalid_argument("processes = " + std::to_string(po.processes) + " must be >= 1");
  if (po.devices != 1 || po.processes != 1) MT_RETURN_IF_ERROR(check_devices(po.devices, global, po.processes));
  if (!po.nvme.paths.empty() && po.shard_optimizer && po.processes > 1)
    return invalid_argument("the NVMe tier does not hold a sharded optimizer's state: shard_optimizer is off with it");
  if (c.has_experts() && (po.devices != 1 || po.processes != 1))
    return unimplemented("a mixture of experts trains on one device of one process (devices: 1)");
  TrainOptions o = global;  // one device's share of the step
  o.global_batch /= po.devices * po.processes;
  MemoryPlan p;
  p.devices = po.devices;
  p.processes = po.processes;
  p.shard_optimizer = po.shard_optimizer && po.processes > 1;
  p.precision = o.precision;
  const auto units = build_param_schemas(c);
  for (const auto& u : units) {
    p.params += int64_t(u.numel);
    if (u.kind == UnitKind::kExpert) p.expert_numel = std::max(p.expert_numel, u.numel);
    else p.slot_numel = std::max(p.slot_numel, u.numel);
  }
  p.expert_slots = c.has_experts() ? po.expert_slots : 0;
  p.active_params = c.has_experts() ? c.num_active_params() : p.params;
  p.checkpoint_numel = sat_mul(uint64_t(o.global_batch), uint64_t(o.seq_len), uint64_t(c.hidden_size));
  TrainOptions node = global;  // this process's share: what its devices stage on its host
  node.global_batch /= po.processes;
  p.host_by_kind = host_kinds(units, p.slot_numel, c, node, po);

  // Device: layer inputs stay on the device when they fit, else they go to host memory; then,
  // when token_chunk is left to the planner, the token-wise work is chunked (the largest power of two
  // that fits, down to kMinTokenChunk) until the plan fits.
  bool on_device = true;
  auto place = [&](int chunk) {
    p.token_chunk = chunk;
    p.workspace_split = workspace_split(c, o, chunk);
    p.workspace_bytes = p.workspace_split.sequence + p.workspace_split.chunk;
    on_device = po.placement != CheckpointPlacement::kHost;
    p.device_by_kind = device_kinds(p, c, o, po, on_device);
    if (po.placement == CheckpointPlacement::kAuto && po.device_budget && sum(p.device_by_kind) > po.device_budget) {
      on_device = false;
      p.device_by_kind = device_kinds(p, c, o, po, false);
    }
    return !po.device_budget || sum(p.device_by_kind) <= po.device_budget;
  };
  const int tokens = o.micro_batch * o.seq_len;
  if (!place(o.token_chunk) && o.token_chunk == 0) {
    int chunk = 1;
    while (chunk * 2 < tokens) chunk *= 2;
    for (; chunk >= kMinTokenChunk; chunk /= 2)
      if (place(chunk)) break;
    if (chunk < kMinTokenChunk) place(0);  // nothing fits: report the unchunked plan's numbers
  }
  p.checkpoints_on_device = on_device;
  if (!on_device)
    p.host_by_kind.push_back(
        {"checkpoints", sat_mul(uint64_t(c.num_layers), p.checkpoint_numel, compute_elem_bytes(o.precision),
                                uint64_t(po.devices))});
  if (po.eval_set_bytes) p.host_by_kind.push_back({"eval_set", po.eval_set_bytes});
  if (po.devices_on_host)
    p.host_by_kind.push_back({"cpu_devices", sat_mul(sum(p.device_by_kind), uint64_t(po.devices))});
  p.host_bytes = sum(p.host_by_kind);
  plan_speculation(p, units, o, po);  // within the host budget the rest leaves
  p.nvme = plan_nvme(units, c, global, po);
  p.device_bytes = sum(p.device_by_kind);
  p.arena_bytes = p.device_bytes - po.backend_bytes;
  if (p.host_bytes == kSaturated || p.device_bytes == kSaturated)
    return invalid_argument("the memory plan's byte counts overflow 64 bits (hidden_size " +
                            std::to_string(c.hidden_size) + ", vocab_size " + std::to_string(c.vocab_size) +
                            ", seq_len " + std::to_string(o.seq_len) + ", global_batch " +
                            std::to_string(o.global_batch) + "): no machine holds this run");
  p.host_bytes_per_param = double(p.host_bytes) / double(p.params);

  if (po.host_budget && p.host_bytes > po.host_budget) {
    p.fits = false;
    p.reason = budget_reason("host", p.host_bytes, po.host_budget);
  } else if (po.device_budget && p.device_bytes > po.device_budget) {
    p.fits = false;
    p.reason = budget_reason("device", p.device_bytes, po.device_budget);
  }
  return p;
}

Json memory_plan_to_json(const MemoryPlan& p) {
  Json host = Json::object(), dev = Json::object();
  for (const auto& [k, b] : p.host_by_kind) host.set(k, int64_t(b));
  for (const auto& [k, b] : p.device_by_kind) dev.set(k, int64_t(b));
  Json j = Json::object({{"params", p.params},
                         {"host_bytes", int64_t(p.host_bytes)},
                         {"devices", p.devices},
                         {"processes", p.processes},
                         {"shard_optimizer", p.shard_optimizer},
                         {"host_bytes_per_param", p.host_bytes_per_param},
                         {"device_bytes", int64_t(p.device_bytes)},
                         {"fits", p.fits},
                         {"checkpoints_on_device", p.checkpoints_on_device},
                         {"precision", precision_name(p.precision)},
                         {"token_chunk", p.token_chunk},
                         {"speculative_units", p.speculative_units},
                         {"speculation", p.speculation},
                         {"host_by_kind", host},
                         {"device_by_kind", dev}});
  if (!p.fits) j.set("reason", p.reason);
  if (p.nvme.on) {
    const NvmePlan& n = p.nvme;
    j.set("nvme", Json::object({{"paths", n.paths},
                                {"masters", n.masters},
                                {"window", n.window},
                                {"drive_bytes", int64_t(n.drive_bytes)},
                                {"drive_bytes_per_path", int64_t(n.drive_bytes_per_path)},
                                {"window_bytes", int64_t(n.window_bytes)},
                                {"io_bytes_per_step", int64_t(n.io_bytes_per_step)},
                                {"device_tflops", n.device_tflops},
                                {"step_compute_seconds", n.step_compute_seconds},
                                {"needed_gbps", n.needed_gbps},
                                {"drive_gbps", n.drive_gbps},
                                {"hides", n.hides},
                                {"verdict", n.verdict}}));
  }
  if (p.expert_slots > 0) {  // a mixture of experts
    j.set("active_params", p.active_params);
    j.set("expert_slots", p.expert_slots);
    j.set("expert_slot_bytes", int64_t(p.expert_numel * compute_elem_bytes(p.precision)));
  }
  return j;
}

}  // namespace mt

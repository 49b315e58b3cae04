#include "engine/exec/planner.h"

#include <algorithm>
#include <cstdio>

#include "engine/optim/host_store.h"
#include "engine/model/layers.h"
#include "engine/model/param_schema.h"

namespace mt {

Result<CheckpointPlacement> parse_checkpoint_placement(const std::string& name) {
  if (name == "auto") return CheckpointPlacement::kAuto;
  if (name == "device") return CheckpointPlacement::kDevice;
  if (name == "host") return CheckpointPlacement::kHost;
  return invalid_argument("checkpoint_placement = '" + name + "' is not one of auto, device, host");
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

uint64_t sum(const std::vector<std::pair<std::string, uint64_t>>& kinds) {
  uint64_t s = 0;
  for (const auto& [k, b] : kinds) s += b;
  return s;
}

// Device regions for a placement; checkpoints_on_device picks the layer-input storage.
std::vector<std::pair<std::string, uint64_t>> device_kinds(const MemoryPlan& p, const ModelConfig& c,
                                                           const TrainOptions& o, const PlanOptions& po,
                                                           bool on_device) {
  const uint64_t e = uint64_t(po.device_elem_bytes);
  const uint64_t tokens = uint64_t(o.global_batch) * uint64_t(o.seq_len);
  const uint64_t layer_io = tokens * uint64_t(c.hidden_size) * e;
  const uint64_t ckpt_buffers = on_device ? uint64_t(c.num_layers) + 1 : 3;  // all inputs, or a ring of 3
  return {{"weight_slots", uint64_t(po.slots) * p.slot_numel * e},
          {"grad_slots", 2 * p.slot_numel * 4},
          {"checkpoints", ckpt_buffers * layer_io},
          {"residual_grads", layer_io},
          {"workspace", p.workspace_numel * e + tokens * 8 + uint64_t(c.head_dim) * 2 + 4096}};  // + DeviceArena alignment
}

}  // namespace

Result<MemoryPlan> plan_memory(const ModelConfig& c, const TrainOptions& o, const PlanOptions& po) {
  MT_RETURN_IF_ERROR(validate(o, c));
  if (po.slots < 2) return invalid_argument("slots = " + std::to_string(po.slots) + " must be >= 2");
  MemoryPlan p;
  const auto units = build_param_schemas(c);
  for (const auto& u : units) {
    p.params += int64_t(u.numel);
    p.slot_numel = std::max(p.slot_numel, u.numel);
  }
  LayerShape s{&c, o.micro_batch, o.seq_len, nullptr, o.head_chunk};
  p.workspace_numel = decoder_acts_numel(s) + decoder_scratch_numel(s) + head_scratch_numel(s);
  p.checkpoint_numel = size_t(o.global_batch) * size_t(o.seq_len) * size_t(c.hidden_size);

  // Host: per-parameter state, the staging of the step's embedding rows (up, then their
  // gradient down), and the LM head's share of a tied embedding gradient.
  const uint64_t P = uint64_t(p.params), gb = state_elem_bytes(o.layout);
  p.host_by_kind = {{"master", 4 * P}, {"grad", gb * P}, {"adam_m", gb * P}, {"adam_v", gb * P}};
  if (po.shadow) p.host_by_kind.push_back({"shadow", 2 * P});
  const uint64_t max_rows = std::min<uint64_t>(uint64_t(c.vocab_size), uint64_t(o.global_batch) * uint64_t(o.seq_len));
  p.host_by_kind.push_back({"embedding_rows", max_rows * uint64_t(c.hidden_size) * 4});
  if (c.tie_word_embeddings) p.host_by_kind.push_back({"tied_head_grad", gb * units[0].numel});

  // Device: layer inputs stay on the device when they fit, else they go to host memory.
  bool on_device = po.placement != CheckpointPlacement::kHost;
  p.device_by_kind = device_kinds(p, c, o, po, on_device);
  if (po.placement == CheckpointPlacement::kAuto && po.device_budget && sum(p.device_by_kind) > po.device_budget) {
    on_device = false;
    p.device_by_kind = device_kinds(p, c, o, po, false);
  }
  p.checkpoints_on_device = on_device;
  if (!on_device)
    p.host_by_kind.push_back({"checkpoints", uint64_t(c.num_layers) * p.checkpoint_numel * uint64_t(po.device_elem_bytes)});
  p.host_bytes = sum(p.host_by_kind);
  p.device_bytes = sum(p.device_by_kind);
  p.host_bytes_per_param = double(p.host_bytes) / double(P);

  if (po.host_budget && p.host_bytes > po.host_budget) {
    p.fits = false;
    p.reason = "host memory: needs " + format_bytes(p.host_bytes) + " (" + std::to_string(p.host_bytes) +
               " bytes), budget " + format_bytes(po.host_budget) + " (" + std::to_string(po.host_budget) + " bytes)";
  } else if (po.device_budget && p.device_bytes > po.device_budget) {
    p.fits = false;
    p.reason = "device memory: needs " + format_bytes(p.device_bytes) + " (" + std::to_string(p.device_bytes) +
               " bytes), budget " + format_bytes(po.device_budget) + " (" + std::to_string(po.device_budget) + " bytes)";
  }
  return p;
}

Json memory_plan_to_json(const MemoryPlan& p) {
  Json host = Json::object(), dev = Json::object();
  for (const auto& [k, b] : p.host_by_kind) host.set(k, int64_t(b));
  for (const auto& [k, b] : p.device_by_kind) dev.set(k, int64_t(b));
  Json j = Json::object({{"params", p.params},
                         {"host_bytes", int64_t(p.host_bytes)},
                         {"host_bytes_per_param", p.host_bytes_per_param},
                         {"device_bytes", int64_t(p.device_bytes)},
                         {"fits", p.fits},
                         {"checkpoints_on_device", p.checkpoints_on_device},
                         {"host_by_kind", host},
                         {"device_by_kind", dev}});
  if (!p.fits) j.set("reason", p.reason);
  return j;
}

}  // namespace mt

// megatrain plan SPEC: the offline memory plan of a job (any preset, up to dense-120b).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "client/cli.h"
#include "client/spec_file.h"
#include "engine/base/host_memory.h"
#include "engine/job/job.h"
#include "engine/exec/planner.h"

namespace mt::cli {

// --offload nvme [--nvme-paths A,B] [--nvme-masters] [--nvme-grad-window N] [--nvme-gbps G]: the
// spec with the NVMe tier (paths only count here: a plan for another machine names none, and
// plans one drive).
Status apply_nvme(const Args& a, JobSpec& spec) {
  if (a.has("offload")) spec.offload = a.get("offload");
  if (a.has("nvme-paths")) {
    spec.nvme.paths.clear();
    std::string list = a.get("nvme-paths");
    for (size_t at = 0; at <= list.size();) {
      const size_t comma = std::min(list.find(',', at), list.size());
      if (comma > at) spec.nvme.paths.push_back(list.substr(at, comma - at));
      at = comma + 1;
    }
  }
  if (a.has("nvme-masters")) spec.nvme.masters = true;
  if (a.has("nvme-grad-window")) {
    MT_ASSIGN_OR_RETURN(const int64_t n, a.integer("nvme-grad-window", 0, 0, 64));
    spec.nvme.grad_window = int(n);
  }
  if (a.has("nvme-gbps")) {
    MT_ASSIGN_OR_RETURN(spec.nvme_gbps, a.number("nvme-gbps", 0, 0, 1e6));
  }
  if (spec.offload == "nvme" && spec.nvme.paths.empty()) spec.nvme.paths = {"(one drive)"};
  return validate(spec);
}

// --seq-len T overrides the spec's (the planner then chunks and places for that length).
Status apply_seq_len(const Args& a, JobSpec& spec) {
  if (!a.has("seq-len")) return Status::Ok();
  if (a.has("max-seq-len")) return invalid_argument("--seq-len and --max-seq-len exclude each other");
  MT_ASSIGN_OR_RETURN(const int64_t t, a.integer("seq-len", 0, 1, TrainLimits::kSeqLen));
  spec.train.seq_len = int(t);
  return validate(spec);
}

int cmd_plan_local(const Args& a) {
  if (a.positional().size() != 1)
    return usage_error("plan");
  auto spec = load_job_spec(a.positional()[0]);
  if (!spec.ok()) return fail(kUsage, spec.status().message());
  auto cfg = resolve_model(*spec);
  if (!cfg.ok()) return fail(kUsage, cfg.status().message());
  // The budgets default to what a run here would get: this machine's RAM and this GPU's free
  // memory (none without a GPU: then say so, since a plan for another machine needs
  // --device-memory). --host-memory 0 plans without a host budget.
  auto host = a.size("host-memory", physical_memory_bytes()), dev = a.size("device-memory", default_device_budget());
  for (const Status* s : {&host.status(), &dev.status()})
    if (!s->ok()) return fail(kUsage, s->message());
  // A card's memory plans for that card: backend auto on a machine without one would plan the
  // CPU backend, whose "device" is more host memory (a login node's plan of a GPU job).
  if (a.has("device-memory") && spec->backend == "auto" && spec->executor != "resident") spec->backend = "cuda";
  if (Status s = apply_seq_len(a, *spec); !s.ok()) return fail(kUsage, s.message());
  if (Status s = apply_nvme(a, *spec); !s.ok()) return fail(kUsage, s.message());
  // The step's compute time the NVMe verdict assumes (0: the planner's default).
  auto tflops = a.number("device-tflops", 0, 0, 1e6);
  if (!tflops.ok()) return fail(kUsage, tflops.status().message());
  auto processes = a.integer("processes", 1, 1, 4096);  // mpirun -np: host bytes are then per process
  if (!processes.ok()) return fail(kUsage, processes.status().message());
  if (a.has("shard-optimizer")) spec->shard_optimizer = true;
  int max_seq_len = 0;
  if (a.has("max-seq-len")) {  // the longest that fits, then its plan
    auto m = longest_seq_len(*spec, *cfg, *host, *dev);
    if (!m.ok()) return fail(kUsage, m.status().message());  // as the daemon's refusal maps
    spec->train.seq_len = max_seq_len = *m;
  }
  auto plan = plan_for_job(*spec, *cfg, *host, *dev, int(*processes), *tflops);  // the daemon's PlanJob: the same planner
  if (!plan.ok()) return fail(kUsage, plan.status().message());
  if (a.json()) {
    Json j = memory_plan_to_json(*plan);
    j.set("seq_len", spec->train.seq_len);
    if (max_seq_len) j.set("max_seq_len", max_seq_len);
    j.set("host_budget_bytes", int64_t(*host));  // as the server's plan says its budgets
    j.set("device_budget_bytes", int64_t(*dev));
    print_json(j);
    return plan->fits ? kOk : fail(kUsage, "the plan does not fit: " + plan->reason);  // RESOURCE_EXHAUSTED's code
  }
  if (max_seq_len) std::printf("max seq_len    %d (the longest that fits these budgets; its plan:)\n", max_seq_len);
  std::printf("seq_len        %d x micro_batch %d x global_batch %d, token chunk %s\n", spec->train.seq_len,
              spec->train.micro_batch, spec->train.global_batch,
              plan->token_chunk ? std::to_string(plan->token_chunk).c_str() : "none");
  std::printf("model          %s, %lld parameters\n", cfg->architecture.c_str(), (long long)plan->params);
  if (cfg->has_experts())
    std::printf("experts        %d per MoE layer x %d layers, %d per token: %lld active parameters per token;\n"
                "               %d expert slots of %s on the device, whatever a step routes\n",
                cfg->moe.num_experts, cfg->num_moe_layers(), cfg->moe.top_k, (long long)plan->active_params,
                plan->expert_slots, format_bytes(plan->expert_numel * compute_elem_bytes(plan->precision)).c_str());
  const std::string per_process =
      plan->processes == 1 ? "" : ", per process of " + std::to_string(plan->processes) +
                                      (plan->shard_optimizer ? ", optimizer sharded" : ", optimizer replicated");
  std::printf("host memory    %s (%.2f bytes/param, %s layout%s)\n", format_bytes(plan->host_bytes).c_str(),
              plan->host_bytes_per_param, memory_layout_name(spec->train.layout), per_process.c_str());
  for (const auto& [k, b] : plan->host_by_kind) std::printf("  %-14s %s\n", k.c_str(), format_bytes(b).c_str());
  std::printf("device memory  %s (%s, layer inputs on %s)\n", format_bytes(plan->device_bytes).c_str(),
              precision_name(plan->precision), plan->checkpoints_on_device ? "device" : "host");
  for (const auto& [k, b] : plan->device_by_kind) std::printf("  %-14s %s\n", k.c_str(), format_bytes(b).c_str());
  std::printf("updates        %s\n", plan->speculation.c_str());
  if (plan->nvme.on) {
    const NvmePlan& n = plan->nvme;
    print_nvme_plan(n.paths, n.masters, n.window, n.drive_bytes, n.drive_bytes_per_path, n.window_bytes, n.verdict);
  }
  if (!a.has("host-memory") && *host) std::printf("host budget    %s (this machine's RAM: --host-memory SIZE plans for another)\n", format_bytes(*host).c_str());
  else std::printf("host budget    %s\n", *host ? format_bytes(*host).c_str() : a.has("host-memory") ? "none (--host-memory 0)" : "none (this machine's RAM is unknown)");
  if (*dev) std::printf("device budget  %s\n", format_bytes(*dev).c_str());
  else std::printf("device budget  none (no GPU here): --device-memory SIZE plans for a card, e.g. 140GB for an H200\n");
  std::printf("fits           %s%s%s\n", plan->fits ? "yes" : "no", plan->fits ? "" : ": ", plan->reason.c_str());
  return plan->fits ? kOk : fail(kUsage, "the plan does not fit: " + plan->reason);
}

}  // namespace mt::cli

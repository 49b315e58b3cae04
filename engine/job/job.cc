#include "engine/job/job.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <map>

#include "engine/io/hf_io.h"
#include "engine/job/job_executor.h"
#include "engine/job/job_run.h"

namespace mt {

Result<ModelConfig> resolve_model(const JobSpec& spec) {
  if (!spec.model.preset.empty()) return preset_config(spec.model.preset);
  if (!spec.model.hf_config.empty()) return load_model_config(spec.model.hf_config);
  return load_model_config(spec.model.hf_model);
}

uint64_t default_device_budget() { return cuda_free_device_memory(); }

bool uses_cuda(const JobSpec& spec) { return spec.backend == "cuda" || (spec.backend == "auto" && cuda_available()); }

Precision job_precision(const JobSpec& spec) {
  auto p = resolve_precision(spec.precision, uses_cuda(spec));
  return p.ok() ? *p : Precision::kFp32;  // validate(spec) refuses any other name first
}

TrainOptions job_train_options(const JobSpec& spec) {
  TrainOptions t = spec.train;
  t.precision = job_precision(spec);
  return t;
}

PlanOptions job_plan_options(const JobSpec& spec, const ModelConfig& cfg, uint64_t host_budget,
                             uint64_t device_budget, int processes) {
  PlanOptions p;
  p.slots = spec.slots;
  p.expert_slots = spec.expert_slots;
  if (auto placement = parse_checkpoint_placement(spec.checkpoint_placement); placement.ok()) p.placement = *placement;
  p.host_budget = host_budget;
  p.device_budget = device_budget;
  p.devices = spec.devices;
  p.processes = processes;
  p.shard_optimizer = spec.shard_optimizer;
  p.eval_set_bytes = HeldOutSet::host_bytes(spec);
  p.devices_on_host = !uses_cuda(spec);
  if (spec.offload == "nvme") p.nvme = spec.nvme, p.nvme_gbps = spec.nvme_gbps;
  if (auto s = parse_speculation(spec.speculative_updates); s.ok() && spec.executor == "streaming") p.speculation = *s;
  if (uses_cuda(spec)) {
    const uint64_t tokens = uint64_t(spec.train.micro_batch) * uint64_t(spec.train.seq_len);
    // the op scratch's widest norm: the hidden size, or a q/k norm over a whole projection (OLMo 2)
    const int widest_norm = std::max({cfg.hidden_size, cfg.q_norm_width(), cfg.k_norm_width()});
    const uint64_t moe = cfg.has_experts() || cfg.attention_sinks
                             ? cuda_moe_scratch_bytes(tokens, cfg.moe.num_experts, std::max(cfg.moe.top_k, 1), cfg.num_heads)
                             : 0;
    p.backend_bytes = cuda_fixed_device_bytes(cuda_options(spec, cfg, 0), tokens, uint64_t(widest_norm), moe);
  }
  return p;
}

// Each path a directory, and each filesystem (paths that share one, together) with room for
// its share of the tier's bytes.
Status check_nvme_space(const MemoryPlan& plan, const NvmeTierOptions& nvme) {
  std::map<dev_t, std::pair<uint64_t, uint64_t>> need_free;  // per filesystem: bytes needed, free
  for (const std::string& path : nvme.paths) {
    struct stat st {};
    struct statvfs fs {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || ::statvfs(path.c_str(), &fs) != 0)
      return failed_precondition("memory.nvme_paths: '" + path + "' is not a directory this process can use");
    auto& [need, free] = need_free[st.st_dev];
    need += plan.nvme.drive_bytes_per_path;
    free = uint64_t(fs.f_bavail) * uint64_t(fs.f_frsize);
    if (need > free)
      return resource_exhausted("memory.nvme_paths: '" + path + "' has " + format_bytes(free) + " free; the NVMe tier needs " +
                                format_bytes(need) + " there (" + format_bytes(plan.nvme.drive_bytes) + " over " +
                                std::to_string(nvme.paths.size()) + " paths)");
  }
  return Status::Ok();
}

Result<MemoryPlan> plan_for_job(const JobSpec& spec, const ModelConfig& cfg, uint64_t host_budget,
                                uint64_t device_budget, int processes, double device_tflops) {
  MT_RETURN_IF_ERROR(validate(spec));
  if (uses_cuda(spec)) MT_RETURN_IF_ERROR(cuda_supports_head_dim(cfg.head_dim));
  PlanOptions po = job_plan_options(spec, cfg, host_budget, device_budget, processes);
  po.device_tflops = device_tflops;
  return plan_memory(cfg, job_train_options(spec), po);
}

Result<int> longest_seq_len(const JobSpec& spec, const ModelConfig& cfg, uint64_t host_budget, uint64_t device_budget) {
  JobSpec s = spec;
  std::string reason;  // the last plan's, when it did not fit
  auto fits = [&](int T) -> Result<bool> {
    s.train.seq_len = T;
    MT_ASSIGN_OR_RETURN(MemoryPlan p, plan_for_job(s, cfg, host_budget, device_budget));
    reason = p.reason;
    return p.fits;
  };
  const int64_t by_tokens = TrainLimits::kTokensPerStep / std::max(1, spec.train.global_batch);
  int lo = 1, hi = int(std::min<int64_t>(TrainLimits::kSeqLen, by_tokens));  // fits(lo); answer in [lo, hi]
  MT_ASSIGN_OR_RETURN(bool any, fits(lo));
  if (!any) return failed_precondition("not even seq_len = 1 fits the budgets: " + reason);
  MT_ASSIGN_OR_RETURN(bool all, fits(hi));
  if (all) return hi;
  while (hi - lo > 1) {  // fits(lo), !fits(hi)
    const int mid = lo + (hi - lo) / 2;
    MT_ASSIGN_OR_RETURN(bool ok, fits(mid));
    (ok ? lo : hi) = mid;
  }
  return lo;
}

JobRunner::JobRunner(JobSpec spec, std::string job_dir, JobHooks hooks, uint64_t device_budget, uint64_t host_budget)
    : spec_(std::move(spec)),
      job_dir_(std::move(job_dir)),
      hooks_(std::move(hooks)),
      device_budget_(device_budget),
      host_budget_(host_budget) {}

Result<JobResult> JobRunner::run() {
  JobRun run(spec_, job_dir_, hooks_, {cancel_, checkpoint_now_});
  MT_RETURN_IF_ERROR(run.open(device_budget_, host_budget_));
  return run.train();
}

}  // namespace mt

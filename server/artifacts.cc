#include "server/artifacts.h"

#include <sys/stat.h>

#include <filesystem>

#include "engine/base/disk_usage.h"
#include "engine/io/checkpoint.h"
#include "engine/io/hf_io.h"
#include "engine/io/model_files.h"
#include "server/spec_convert.h"

namespace mt::server {

namespace fs = std::filesystem;
namespace v1 = megatrain::v1;

namespace {

constexpr size_t kShardBytes = size_t(5) << 30;  // as `megatrain export`'s default --shard-size 5GB

Result<CheckpointInfo> pick_checkpoint(const std::string& job_dir, long step) {
  MT_ASSIGN_OR_RETURN(auto all, list_checkpoints(job_dir + "/checkpoints"));
  if (all.empty()) return failed_precondition("the job has no checkpoint yet");
  if (step == 0) {
    for (const auto& c : all)
      if (c.latest) return c;
    return all.back();
  }
  std::string have;
  for (const auto& c : all) {
    if (c.step == step) return c;
    have += (have.empty() ? "" : ", ") + std::to_string(c.step);
  }
  return not_found("step = " + std::to_string(step) + " names no checkpoint of the job (it has steps " + have + ")");
}

}  // namespace

Result<v1::ListCheckpointsResponse> list_job_checkpoints(const std::string& job_dir) {
  MT_ASSIGN_OR_RETURN(auto all, list_checkpoints(job_dir + "/checkpoints"));
  v1::ListCheckpointsResponse out;
  for (const auto& c : all) {
    v1::CheckpointInfo* p = out.add_checkpoints();
    p->set_step(c.step);
    p->set_loss(c.loss);
    p->set_size_bytes(c.size_bytes);
    p->set_unix_ms(c.unix_ms);
    p->set_path(c.dir);
    p->set_latest(c.latest);
    if (c.evaluated) p->set_eval_loss(c.eval_loss);
    p->set_best(c.best);
  }
  return out;
}

Result<ExportTarget> export_target(const std::string& data_root, const std::string& out_dir) {
  const std::string field = "out_dir = '" + out_dir + "'";
  if (out_dir.empty()) return invalid_argument("out_dir is empty (a directory under the data root)");
  if (out_dir.size() > 4096 || out_dir.find('\0') != std::string::npos)
    return invalid_argument("out_dir is not a usable path");
  MT_RETURN_IF_ERROR(check_printable("out_dir", out_dir));
  const fs::path root = fs::path(data_root).lexically_normal();
  const fs::path given(out_dir);
  for (const auto& part : given)
    if (part == "..") return invalid_argument(field + " has a '..' component; name a directory under the data root");
  const fs::path p = (given.is_absolute() ? given : root / given).lexically_normal();
  const fs::path rel = p.lexically_relative(root);
  if (rel.empty() || *rel.begin() == "..")
    return invalid_argument(field + " is outside the data root '" + data_root + "'");
  if (rel == ".") return invalid_argument(field + " is the data root itself; name a directory under it");
  return ExportTarget{rel.string(), (root / rel).string()};
}

Result<v1::ExportModelResponse> Exporter::run(const JobManager::JobFiles& job, const v1::ExportModelRequest& req) {
  const std::string dtype = req.dtype().empty() ? "bf16" : req.dtype();
  if (dtype != "bf16" && dtype != "fp32") return invalid_argument("dtype = '" + dtype + "' is not one of bf16, fp32");
  if (req.step() < 0) return invalid_argument("step = " + std::to_string(req.step()) + " is negative");
  MT_ASSIGN_OR_RETURN(const ExportTarget target, export_target(job.data_root, req.out_dir()));
  MT_ASSIGN_OR_RETURN(const CheckpointInfo ckpt, pick_checkpoint(job.dir, long(req.step())));
  MT_ASSIGN_OR_RETURN(const ModelConfig cfg, load_model_config(ckpt.dir));
  const uint64_t need = uint64_t(cfg.num_params()) * 16;  // the exact store: master, grad, m, v
  if (job.host_budget && need + job.running_host_bytes > job.host_budget)
    return resource_exhausted("exporting needs " + std::to_string(need) + " bytes of host memory; the host budget " +
                              std::to_string(job.host_budget) + " less the running job's " +
                              std::to_string(job.running_host_bytes) + " does not hold them");
  if (busy_.exchange(true)) return Status(StatusCode::kUnavailable, "another export is in progress; try again");
  struct Release {
    std::atomic<bool>& b;
    ~Release() { b = false; }
  } release{busy_};
  // Opened once, beneath the root and through no symlink; every file is written through it, so
  // swapping a directory of the path for a symlink meanwhile changes where nothing goes.
  auto opened = DirFd::open_beneath(job.data_root, target.rel, true);
  if (!opened.ok()) return opened.status().with_context("out_dir = '" + req.out_dir() + "'");
  const DirFd dir = std::move(opened).value();
  MT_RETURN_IF_ERROR(check_export_dir(dir, req.overwrite()));
  MT_ASSIGN_OR_RETURN(LoadedModel m, load_model_dir(ckpt.dir));
  MT_RETURN_IF_ERROR(export_hf_model(dir, m.cfg, *m.store, dtype == "bf16", kShardBytes, req.overwrite()));
  v1::ExportModelResponse out;
  out.set_out_dir(target.abs);
  out.set_step(ckpt.step);
  out.set_dtype(dtype);
  out.set_size_bytes(dir.file_bytes());
  out.set_checkpoint(ckpt.dir);
  return out;
}

}  // namespace mt::server

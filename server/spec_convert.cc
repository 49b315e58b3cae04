#include "server/spec_convert.h"

#include <google/protobuf/util/json_util.h>

#include <filesystem>

#include "engine/job/job.h"

namespace mt::server {

namespace fs = std::filesystem;

Result<JobSpec> spec_from_proto(const megatrain::v1::JobSpec& proto, const std::vector<std::string>& roots) {
  std::string text;
  google::protobuf::util::JsonPrintOptions opt;
  opt.preserve_proto_field_names = true;
  opt.always_print_primitive_fields = false;
  auto st = google::protobuf::util::MessageToJsonString(proto, &text, opt);
  if (!st.ok()) return invalid_argument("job spec: " + std::string(st.message()));
  MT_ASSIGN_OR_RETURN(Json json, Json::parse(text));
  MT_ASSIGN_OR_RETURN(JobSpec spec, job_spec_from_json(json));
  MT_RETURN_IF_ERROR(resolve_spec_paths(spec, roots));
  return spec;
}

namespace {

bool within(const fs::path& p, const fs::path& root) {
  auto r = root.begin(), q = p.begin();
  for (; r != root.end(); ++r, ++q)
    if (q == p.end() || *q != *r) return false;
  return true;
}

Status resolve_path(const char* field, std::string& value, const std::vector<std::string>& roots) {
  if (value.empty()) return Status::Ok();
  if (roots.empty()) return invalid_argument(std::string(field) + " = '" + value + "': no data root configured");
  std::error_code ec;
  for (const std::string& root : roots) {
    fs::path p = fs::path(value).is_absolute() ? fs::path(value) : fs::path(root) / value;
    fs::path canon = fs::weakly_canonical(p, ec);
    if (ec) continue;
    if (within(canon, fs::path(root))) {
      value = canon.string();
      return Status::Ok();
    }
  }
  return invalid_argument(std::string(field) + " = '" + value + "' resolves outside the allowed roots (--data_root '" +
                          roots.front() + "')");
}

}  // namespace

Status resolve_spec_paths(JobSpec& spec, const std::vector<std::string>& roots) {
  MT_RETURN_IF_ERROR(resolve_path("data.path", spec.data.path, roots));
  MT_RETURN_IF_ERROR(resolve_path("model.hf_config", spec.model.hf_config, roots));
  MT_RETURN_IF_ERROR(resolve_path("model.hf_model", spec.model.hf_model, roots));
  return resolve_path("init.from", spec.init.from, roots);
}

megatrain::v1::JobSpec spec_to_proto(const JobSpec& spec) {
  megatrain::v1::JobSpec out;
  google::protobuf::util::JsonParseOptions opt;
  opt.ignore_unknown_fields = true;
  (void)google::protobuf::util::JsonStringToMessage(job_spec_to_json(spec).dump(), &out, opt);
  return out;
}

Result<MemoryPlan> plan_job(const JobSpec& spec, const ModelConfig& cfg, const Budgets& budgets) {
  return plan_for_job(spec, cfg, budgets.host, budgets.device);  // the engine's one planner
}

void plan_to_proto(const MemoryPlan& p, const Budgets& budgets, megatrain::v1::MemoryPlan* out) {
  out->set_fits(p.fits);
  out->set_reason(p.reason);
  out->set_params(p.params);
  out->set_host_bytes(p.host_bytes);
  out->set_host_bytes_per_param(p.host_bytes_per_param);
  for (const auto& [k, v] : p.host_by_kind) (*out->mutable_host_bytes_by_kind())[k] = v;
  out->set_device_bytes(p.device_bytes);
  for (const auto& [k, v] : p.device_by_kind) (*out->mutable_device_bytes_by_kind())[k] = v;
  out->set_checkpoints_on_device(p.checkpoints_on_device);
  out->set_host_budget_bytes(budgets.host);
  out->set_device_budget_bytes(budgets.device);
}

}  // namespace mt::server

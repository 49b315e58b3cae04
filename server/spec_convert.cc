#include "server/spec_convert.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "engine/job/job.h"
#include "engine/text/utf8.h"

namespace mt::server {

namespace fs = std::filesystem;

Result<JobSpec> spec_from_proto(const megatrain::v1::JobSpec& proto, const std::vector<std::string>& roots,
                                const std::vector<std::string>& nvme_roots) {
  std::string text;
  google::protobuf::util::JsonPrintOptions opt;
  opt.preserve_proto_field_names = true;
  opt.always_print_primitive_fields = false;
  auto st = google::protobuf::util::MessageToJsonString(proto, &text, opt);
  if (!st.ok()) return invalid_argument("job spec: " + std::string(st.message()));
  MT_ASSIGN_OR_RETURN(Json json, Json::parse(text));
  MT_ASSIGN_OR_RETURN(JobSpec spec, job_spec_from_json(json));
  // here, not in the engine's validation: a daemon restarted over jobs with longer names runs them
  if (spec.name.size() > kMaxJobNameBytes)
    return invalid_argument("name is " + std::to_string(spec.name.size()) + " bytes, at most " +
                            std::to_string(kMaxJobNameBytes));
  MT_RETURN_IF_ERROR(check_printable("name", spec.name));
  MT_RETURN_IF_ERROR(resolve_spec_paths(spec, roots, nvme_roots));
  return spec;
}

namespace {

// Characters a terminal does not show as themselves: C0/C1 controls and DEL, and the invisible
// format characters that reorder or hide text (bidi embeddings, overrides and isolates, the
// Arabic letter mark, zero-width space/joiners, word joiner and friends, the BOM, interlinear
// annotation marks). A name with U+202E could show "exe.txt" for "txt.exe" in another user's list.
const char* unshown(uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F)) return "control character";
  if (cp == 0x061C || cp == 0x180E || (cp >= 0x200B && cp <= 0x200F) || (cp >= 0x202A && cp <= 0x202E) ||
      (cp >= 0x2060 && cp <= 0x206F) || cp == 0xFEFF || (cp >= 0xFFF9 && cp <= 0xFFFB))
    return "invisible format character";
  return nullptr;
}

}  // namespace

Status check_printable(const std::string& field, const std::string& text) {
  if (utf8::valid_prefix(text) != text.size())
    return invalid_argument(field + " is not valid UTF-8 at byte " + std::to_string(utf8::valid_prefix(text)));
  for (size_t i = 0; i < text.size();) {
    int len = 1;
    const uint32_t cp = utf8::decode_at(text, i, &len);
    if (const char* what = unshown(cp)) {
      char u[12];
      std::snprintf(u, sizeof u, "U+%04X", unsigned(cp));
      return invalid_argument(field + " has the " + std::string(what) + " " + u + " at byte " + std::to_string(i) +
                              ": it is shown in other users' lists and logs, so it is printable text");
    }
    i += size_t(len);
  }
  return Status::Ok();
}

namespace {

bool within(const fs::path& p, const fs::path& root) {
  auto r = root.begin(), q = p.begin();
  for (; r != root.end(); ++r, ++q)
    if (q == p.end() || *q != *r) return false;
  return true;
}

bool within_any(const fs::path& p, const std::vector<fs::path>& roots) {
  return std::any_of(roots.begin(), roots.end(), [&](const fs::path& r) { return within(p, r); });
}

// A path is taken under the first root it names (relative paths: the first root); it must stay
// inside the allowed roots once symlinks are resolved. One that names a place inside a root but
// resolves outside escaped through a symlink, and is refused rather than tried elsewhere.
Status resolve_path(const char* field, std::string& value, const std::vector<std::string>& roots) {
  if (value.empty()) return Status::Ok();
  if (value.find('\0') != std::string::npos) return invalid_argument(std::string(field) + " holds a NUL byte");
  if (value.size() > 4096)
    return invalid_argument(std::string(field) + " is " + std::to_string(value.size()) + " bytes, longer than a path");
  if (roots.empty()) return invalid_argument(std::string(field) + " = '" + value + "': no data root configured");
  std::error_code ec;
  std::vector<fs::path> real_roots;
  for (const std::string& root : roots) {
    fs::path r = fs::weakly_canonical(root, ec);
    real_roots.push_back(ec ? fs::path(root).lexically_normal() : r);
  }
  for (size_t i = 0; i < roots.size(); ++i) {
    const fs::path p = (fs::path(value).is_absolute() ? fs::path(value) : fs::path(roots[i]) / value).lexically_normal();
    const fs::path canon = fs::weakly_canonical(p, ec);
    if (ec) continue;
    if (within_any(canon, real_roots)) {
      value = canon.string();
      return Status::Ok();
    }
    if (within(p, fs::path(roots[i]).lexically_normal()) || within(p, real_roots[i]))
      return invalid_argument(std::string(field) + " = '" + value + "' escapes '" + roots[i] +
                              "' through a symlink: it resolves to '" + canon.string() + "', outside the allowed roots");
  }
  return invalid_argument(std::string(field) + " = '" + value + "' resolves outside the allowed roots (--data_root '" +
                          roots.front() + "')");
}

Status require_file(const char* field, const std::string& path, bool regular) {
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return invalid_argument(std::string(field) + " = '" + path + "' does not exist");
  if (regular && !fs::is_regular_file(st))
    return invalid_argument(std::string(field) + " = '" + path + "' is not a regular file");
  return Status::Ok();
}

// A data spec's paths (`field`: data, or eval.data).
Status resolve_data_paths(const std::string& field, DataSpec& d, const std::vector<std::string>& roots) {
  MT_RETURN_IF_ERROR(resolve_path((field + ".path").c_str(), d.path, roots));
  if (d.source == "jsonl" && !d.tokenizer.empty() && d.tokenizer != "byte")
    MT_RETURN_IF_ERROR(resolve_path((field + ".tokenizer").c_str(), d.tokenizer, roots));
  return Status::Ok();
}

Status check_data_inputs(const std::string& field, const DataSpec& d) {
  const std::string path = field + ".path", tokenizer = field + ".tokenizer";
  if (d.source == "text" || d.source == "tokens" || d.source == "jsonl")
    MT_RETURN_IF_ERROR(require_file(path.c_str(), d.path, true));
  if (d.source == "shards") MT_RETURN_IF_ERROR(require_file(path.c_str(), d.path, false));
  if (d.source == "jsonl" && !d.tokenizer.empty() && d.tokenizer != "byte") MT_RETURN_IF_ERROR(require_file(tokenizer.c_str(), d.tokenizer, false));
  return Status::Ok();
}

}  // namespace

// The NVMe tier's paths: under the server's --nvme_paths, or its data root; none named: the
// server's own. A client never puts scratch files anywhere else.
static Status resolve_nvme_paths(JobSpec& spec, const std::vector<std::string>& roots, const std::vector<std::string>& nvme_roots) {
  if (spec.offload != "nvme") return Status::Ok();
  if (spec.nvme.paths.empty()) {
    if (nvme_roots.empty())
      return invalid_argument("memory.offload = nvme names no memory.nvme_paths, and this server has no --nvme_paths");
    spec.nvme.paths = nvme_roots;
    return Status::Ok();
  }
  std::vector<std::string> allowed;  // the data root (relative paths resolve there; never the state directory)
  if (!roots.empty()) allowed.push_back(roots.front());
  allowed.insert(allowed.end(), nvme_roots.begin(), nvme_roots.end());
  for (std::string& p : spec.nvme.paths) MT_RETURN_IF_ERROR(resolve_path("memory.nvme_paths", p, allowed));
  return Status::Ok();
}

Status recheck_spec_paths(const JobSpec& spec, const std::vector<std::string>& roots,
                          const std::vector<std::string>& nvme_roots) {
  JobSpec again = spec;
  if (Status st = resolve_spec_paths(again, roots, nvme_roots); !st.ok())
    return invalid_argument("since the submit, " + st.message());
  // resolution changes paths only: any difference is a path that resolves elsewhere now
  const std::string moved = spec_differences(job_spec_to_json(spec), job_spec_to_json(again));
  if (moved.empty()) return Status::Ok();
  return invalid_argument("since the submit, a path resolves elsewhere (a component replaced by a symlink?): " + moved);
}

Status resolve_spec_paths(JobSpec& spec, const std::vector<std::string>& roots, const std::vector<std::string>& nvme_roots) {
  MT_RETURN_IF_ERROR(resolve_nvme_paths(spec, roots, nvme_roots));
  MT_RETURN_IF_ERROR(resolve_data_paths("data", spec.data, roots));
  if (spec.eval.enabled) MT_RETURN_IF_ERROR(resolve_data_paths("eval.data", spec.eval.data, roots));
  MT_RETURN_IF_ERROR(resolve_path("model.hf_config", spec.model.hf_config, roots));
  MT_RETURN_IF_ERROR(resolve_path("model.hf_model", spec.model.hf_model, roots));
  return resolve_path("init.from", spec.init.from, roots);
}

Status check_spec_inputs(const JobSpec& spec) {
  MT_RETURN_IF_ERROR(check_data_inputs("data", spec.data));
  if (spec.eval.enabled) MT_RETURN_IF_ERROR(check_data_inputs("eval.data", spec.eval.data));
  if (!spec.init.from.empty()) MT_RETURN_IF_ERROR(require_file("init.from", spec.init.from, false));
  return Status::Ok();
}

megatrain::v1::JobSpec spec_to_proto(const JobSpec& spec) {
  megatrain::v1::JobSpec out;
  google::protobuf::util::JsonParseOptions opt;
  opt.ignore_unknown_fields = true;
  (void)google::protobuf::util::JsonStringToMessage(job_spec_to_json(spec).dump(), &out, opt);
  return out;
}

Result<MemoryPlan> plan_job(const JobSpec& spec, const ModelConfig& cfg, const Budgets& budgets) {
  if (spec.devices > budgets.devices)
    return failed_precondition("devices = " + std::to_string(spec.devices) + ": this server owns " +
                               std::to_string(budgets.devices) + " (megatraind --devices)");
  return plan_for_job(spec, cfg, budgets.host, budgets.device);  // the engine's one planner
}

void plan_to_proto(const MemoryPlan& p, const Budgets& budgets, megatrain::v1::MemoryPlan* out) {
  if (p.nvme.on) {
    const NvmePlan& n = p.nvme;
    auto* o = out->mutable_nvme();
    o->set_paths(n.paths);
    o->set_masters(n.masters);
    o->set_window(n.window);
    o->set_drive_bytes(n.drive_bytes);
    o->set_drive_bytes_per_path(n.drive_bytes_per_path);
    o->set_window_bytes(n.window_bytes);
    o->set_io_bytes_per_step(n.io_bytes_per_step);
    o->set_device_tflops(n.device_tflops);
    o->set_step_compute_seconds(n.step_compute_seconds);
    o->set_needed_gbps(n.needed_gbps);
    o->set_drive_gbps(n.drive_gbps);
    o->set_hides(n.hides);
    o->set_verdict(n.verdict);
  }
  out->set_fits(p.fits);
  out->set_reason(p.reason);
  out->set_params(p.params);
  out->set_host_bytes(p.host_bytes);
  out->set_host_bytes_per_param(p.host_bytes_per_param);
  for (const auto& [k, v] : p.host_by_kind) (*out->mutable_host_bytes_by_kind())[k] = v;
  out->set_device_bytes(p.device_bytes);
  for (const auto& [k, v] : p.device_by_kind) (*out->mutable_device_bytes_by_kind())[k] = v;
  out->set_checkpoints_on_device(p.checkpoints_on_device);
  out->set_precision(precision_name(p.precision));
  out->set_token_chunk(p.token_chunk);
  out->set_speculative_units(p.speculative_units);
  out->set_speculation(p.speculation);
  out->set_host_budget_bytes(budgets.host);
  out->set_device_budget_bytes(budgets.device);
}

}  // namespace mt::server

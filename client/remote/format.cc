#include "client/remote/format.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <map>
#include <string_view>

#include "engine/text/utf8.h"

namespace mt::cli {

std::string state_name(v1::JobState s) {
  std::string n = v1::JobState_Name(s);
  if (n.rfind("JOB_STATE_", 0) == 0) n = n.substr(10);
  for (char& c : n) c = char(std::tolower(static_cast<unsigned char>(c)));
  return n.empty() ? "unknown" : n;
}

bool terminal(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED || s == v1::JOB_STATE_CANCELLED;
}

std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = double(b);
  int u = 0;
  while (v >= 1024 && u < 5) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", v, units[u]);
  return buf;
}

namespace {

// The spec as protobuf's JSON mapping writes it (snake_case keys), read back as a Json value.
Json spec_json(const v1::JobSpec& spec) {
  std::string text;
  google::protobuf::util::JsonPrintOptions opt;
  opt.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(spec, &text, opt).ok()) return Json();
  auto j = Json::parse(text);
  return j.ok() ? *j : Json();
}

// Protobuf maps have no order; show them sorted.
std::map<std::string, uint64_t> sorted(const google::protobuf::Map<std::string, uint64_t>& m) {
  return {m.begin(), m.end()};
}

std::string local_time(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  const std::time_t t = std::time_t(unix_ms / 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// "running", "next in the queue", "3rd in the queue", "not queued".
std::string queue_place(const v1::Job& job) {
  const int p = job.queue_position();
  if (p == 0) return job.state() == v1::JOB_STATE_RUNNING ? "running" : "not queued";
  if (p < 0) return "not queued";
  if (p == 1) return "next in the queue";
  return "position " + std::to_string(p) + " in the queue";
}

}  // namespace

Json job_to_json(const v1::Job& job, bool with_spec) {
  Json j = Json::object({{"id", job.id()},
                         {"name", job.name()},
                         {"state", state_name(job.state())},
                         {"reason", job.reason()},
                         {"step", int64_t(job.step())},
                         {"total_steps", int64_t(job.total_steps())},
                         {"loss", job.loss()},
                         {"first_loss", job.first_loss()},
                         {"tokens_per_second", job.tokens_per_second()},
                         {"last_checkpoint", job.last_checkpoint()},
                         {"created_unix_ms", int64_t(job.created_unix_ms())},
                         {"started_unix_ms", int64_t(job.started_unix_ms())},
                         {"finished_unix_ms", int64_t(job.finished_unix_ms())},
                         {"waiting_for_data", job.waiting_for_data()},
                         {"data_spooled_tokens", int64_t(job.data_spooled_tokens())},
                         {"data_consumed_tokens", int64_t(job.data_consumed_tokens())},
                         // A uint64 sum that overflows int64 and a double's 53 bits: a decimal
                         // string, as protobuf's JSON mapping writes uint64.
                         {"data_consumed_checksum", std::to_string(job.data_consumed_checksum())},
                         {"priority", job.priority()},
                         {"queue_position", job.queue_position()},
                         {"preemptions", job.preemptions()}});
  if (job.has_packing_efficiency()) j.set("packing_efficiency", job.packing_efficiency());
  if (job.grad_norm() > 0) {  // the last step's update, once the daemon has run one
    j.set("grad_norm", job.grad_norm());
    j.set("grad_clipped", job.grad_clipped());
    j.set("learning_rate", job.learning_rate());
  }
  if (!job.tensorboard_dir().empty()) j.set("tensorboard_dir", job.tensorboard_dir());
  if (job.eval_step() > 0) {  // the latest held-out evaluation and the best so far
    j.set("eval_step", int64_t(job.eval_step()));
    j.set("eval_loss", job.eval_loss());
    j.set("best_eval_step", int64_t(job.best_eval_step()));
    j.set("best_eval_loss", job.best_eval_loss());
  }
  if (with_spec) j.set("spec", spec_json(job.spec()));
  return j;
}

Json plan_to_json(const v1::MemoryPlan& p) {
  Json host = Json::object(), dev = Json::object();
  for (const auto& [k, b] : sorted(p.host_bytes_by_kind())) host.set(k, int64_t(b));
  for (const auto& [k, b] : sorted(p.device_bytes_by_kind())) dev.set(k, int64_t(b));
  Json j = Json::object({{"params", int64_t(p.params())},
                         {"host_bytes", int64_t(p.host_bytes())},
                         {"host_bytes_per_param", p.host_bytes_per_param()},
                         {"device_bytes", int64_t(p.device_bytes())},
                         {"fits", p.fits()},
                         {"checkpoints_on_device", p.checkpoints_on_device()},
                         {"precision", p.precision()},
                         {"token_chunk", p.token_chunk()},
                         {"speculative_units", p.speculative_units()},
                         {"speculation", p.speculation()},
                         {"host_by_kind", host},
                         {"device_by_kind", dev},
                         {"host_budget_bytes", int64_t(p.host_budget_bytes())},
                         {"device_budget_bytes", int64_t(p.device_budget_bytes())}});
  if (!p.fits()) j.set("reason", p.reason());
  if (p.has_nvme()) {
    const v1::NvmePlan& n = p.nvme();
    j.set("nvme", Json::object({{"paths", n.paths()},
                                {"masters", n.masters()},
                                {"window", n.window()},
                                {"drive_bytes", int64_t(n.drive_bytes())},
                                {"drive_bytes_per_path", int64_t(n.drive_bytes_per_path())},
                                {"window_bytes", int64_t(n.window_bytes())},
                                {"io_bytes_per_step", int64_t(n.io_bytes_per_step())},
                                {"device_tflops", n.device_tflops()},
                                {"step_compute_seconds", n.step_compute_seconds()},
                                {"needed_gbps", n.needed_gbps()},
                                {"drive_gbps", n.drive_gbps()},
                                {"hides", n.hides()},
                                {"verdict", n.verdict()}}));
  }
  return j;
}

void print_job_human(const v1::Job& job) {
  std::printf("job          %s (%s)\n", job.id().c_str(), job.name().c_str());
  std::printf("state        %s%s%s\n", state_name(job.state()).c_str(), job.reason().empty() ? "" : ": ",
              job.reason().c_str());
  std::printf("step         %lld/%lld\n", (long long)job.step(), (long long)job.total_steps());
  std::printf("priority     %d (%s)%s\n", job.priority(), queue_place(job).c_str(),
              job.preemptions() ? (", preempted " + std::to_string(job.preemptions()) + "x").c_str() : "");
  if (job.step() > 0) {
    std::printf("loss         %.6f (first %.6f)\n", job.loss(), job.first_loss());
    std::printf("tokens/s     %.0f\n", job.tokens_per_second());
  }
  if (job.eval_step() > 0)
    std::printf("held-out     loss %.6f at step %lld (best %.6f at step %lld)\n", job.eval_loss(),
                (long long)job.eval_step(), job.best_eval_loss(), (long long)job.best_eval_step());
  if (job.grad_norm() > 0)
    std::printf("update       grad norm %.4g%s, lr %.4g (last step)\n", job.grad_norm(),
                job.grad_clipped() ? " (clipped)" : "", job.learning_rate());
  if (job.has_aux_loss())
    std::printf("experts      %lld/%lld routed, load-balancing loss %.4f (last step)\n", (long long)job.experts_routed(),
                (long long)job.experts_total(), job.aux_loss());
  if (!job.tensorboard_dir().empty()) std::printf("tensorboard  %s\n", job.tensorboard_dir().c_str());
  if (job.has_packing_efficiency()) std::printf("packing      %.1f%% of slots are real tokens\n", 100 * job.packing_efficiency());
  if (!job.last_checkpoint().empty()) std::printf("checkpoint   %s\n", job.last_checkpoint().c_str());
  if (job.spec().data().source() == "push")
    std::printf("data         %llu tokens spooled, %llu consumed%s\n", (unsigned long long)job.data_spooled_tokens(),
                (unsigned long long)job.data_consumed_tokens(), job.waiting_for_data() ? " (waiting for data)" : "");
  std::printf("created      %s\n", local_time(job.created_unix_ms()).c_str());
  if (job.started_unix_ms()) std::printf("started      %s\n", local_time(job.started_unix_ms()).c_str());
  if (job.finished_unix_ms()) std::printf("finished     %s\n", local_time(job.finished_unix_ms()).c_str());
}

namespace {

// Terminal columns of a code point: 2 for East Asian wide and fullwidth forms and emoji, else 1.
int columns(uint32_t cp) {
  const bool wide = (cp >= 0x1100 && cp <= 0x115F) || (cp >= 0x2E80 && cp <= 0xA4CF) || (cp >= 0xAC00 && cp <= 0xD7A3) ||
                    (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF60) ||
                    (cp >= 0xFFE0 && cp <= 0xFFE6) || (cp >= 0x1F300 && cp <= 0x1F64F) ||
                    (cp >= 0x1F900 && cp <= 0x1F9FF) || (cp >= 0x20000 && cp <= 0x3FFFD);
  return wide ? 2 : 1;
}

// `s` padded with spaces to `width` terminal columns (printf's %-20s pads by bytes, so a name
// with accents or CJK pushed the row's later columns out of line).
std::string padded(const std::string& s, int width) {
  const std::string_view v = std::string_view(s).substr(0, utf8::valid_prefix(s));
  int used = 0;
  for (size_t i = 0; i < v.size();) {
    int len = 1;
    used += columns(utf8::decode_at(v, i, &len));
    i += size_t(len);
  }
  return s + std::string(size_t(std::max(0, width - used)), ' ');
}

}  // namespace

void print_job_row(const v1::Job& job, bool header) {
  if (header)
    std::printf("%-10s %-20s %-10s %4s %5s %13s %10s %10s\n", "ID", "NAME", "STATE", "PRI", "POS", "STEP", "LOSS", "TOK/S");
  char step[40];
  std::snprintf(step, sizeof step, "%lld/%lld", (long long)job.step(), (long long)job.total_steps());
  const std::string pos = job.queue_position() < 0 ? "-" : std::to_string(job.queue_position());
  std::printf("%-10s %s %-10s %4d %5s %13s %10.4f %10.0f\n", job.id().c_str(), padded(job.name(), 20).c_str(),
              state_name(job.state()).c_str(), job.priority(), pos.c_str(), step, job.loss(), job.tokens_per_second());
}

void print_plan_human(const v1::MemoryPlan& p) {
  std::printf("parameters     %lld\n", (long long)p.params());
  std::printf("host memory    %s (%.2f bytes/param)\n", human_bytes(p.host_bytes()).c_str(), p.host_bytes_per_param());
  for (const auto& [k, b] : sorted(p.host_bytes_by_kind())) std::printf("  %-14s %s\n", k.c_str(), human_bytes(b).c_str());
  std::printf("device memory  %s (%s, layer inputs on %s)\n", human_bytes(p.device_bytes()).c_str(),
              p.precision().c_str(), p.checkpoints_on_device() ? "device" : "host");
  for (const auto& [k, b] : sorted(p.device_bytes_by_kind())) std::printf("  %-14s %s\n", k.c_str(), human_bytes(b).c_str());
  if (!p.speculation().empty()) std::printf("updates        %s\n", p.speculation().c_str());
  if (p.has_nvme())
    print_nvme_plan(p.nvme().paths(), p.nvme().masters(), p.nvme().window(), p.nvme().drive_bytes(),
                    p.nvme().drive_bytes_per_path(), p.nvme().window_bytes(), p.nvme().verdict());
  std::printf("server budget  host %s, device %s\n",
              p.host_budget_bytes() ? human_bytes(p.host_budget_bytes()).c_str() : "unlimited",
              p.device_budget_bytes() ? human_bytes(p.device_budget_bytes()).c_str() : "unlimited");
  std::printf("fits           %s%s%s\n", p.fits() ? "yes" : "no", p.fits() ? "" : ": ", p.reason().c_str());
}

}  // namespace mt::cli

#include "server/job_record.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>

#include "engine/io/safetensors.h"

namespace mt::server {

using megatrain::v1::JobState;

bool terminal(megatrain::v1::JobState s) {
  return s == megatrain::v1::JOB_STATE_SUCCEEDED || s == megatrain::v1::JOB_STATE_FAILED ||
         s == megatrain::v1::JOB_STATE_CANCELLED;
}

bool JobRecord::terminal() const { return mt::server::terminal(state); }

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const char* state_name(JobState s) {
  switch (s) {
    case megatrain::v1::JOB_STATE_QUEUED: return "queued";
    case megatrain::v1::JOB_STATE_RUNNING: return "running";
    case megatrain::v1::JOB_STATE_SUCCEEDED: return "succeeded";
    case megatrain::v1::JOB_STATE_FAILED: return "failed";
    case megatrain::v1::JOB_STATE_CANCELLED: return "cancelled";
    case megatrain::v1::JOB_STATE_PAUSED: return "paused";
    default: return "unspecified";
  }
}

Json record_to_json(const JobRecord& r) {
  Json j = Json::object({{"id", r.id},
                       {"name", r.name},
                       {"state", state_name(r.state)},
                       {"reason", r.reason},
                       {"spec", r.spec},
                       {"step", int64_t(r.step)},
                       {"total_steps", int64_t(r.total_steps)},
                       {"loss", r.loss},
                       {"first_loss", r.first_loss},
                       {"tokens_per_second", r.tokens_per_second},
                       {"last_checkpoint", r.last_checkpoint},
                       {"created_ms", r.created_ms},
                       {"started_ms", r.started_ms},
                       {"finished_ms", r.finished_ms},
                       {"consumed_tokens", int64_t(r.consumed_tokens)},
                       // a uint64 sum: a string, since JSON numbers are doubles
                       {"consumed_checksum", std::to_string(r.consumed_checksum)},
                       {"spooled_tokens", int64_t(r.spooled_tokens)},
                       {"cancel_requested", r.cancel_requested},
                       {"device_faults", int64_t(r.device_faults)},
                       {"pause_requested", r.pause_requested},
                       {"preemptions", int64_t(r.preemptions)}});
  eval_progress_to_json(r.eval, j);
  const StepStats& u = r.last;
  if (r.step > 0)
    j.set("last_update", Json::object({{"grad_norm", u.grad_norm},
                                       {"lr", double(u.lr)},
                                       {"clipped", u.clipped},
                                       {"packing_efficiency", u.packing_efficiency},
                                       {"aux_loss", u.aux_loss},
                                       {"experts_routed", int64_t(u.experts_routed)},
                                       {"experts_total", int64_t(u.experts_total)}}));
  return j;
}

namespace {
// A record's last_update into `out` (older records lack it: its defaults, as a daemon that never
// saw a step).
void last_update_from_json(const Json* u, StepStats& out) {
  if (!u || !u->is_object()) return;
  auto num = [&](const char* k, double d) { const Json* v = u->find(k); return v && v->is_number() ? v->as_double() : d; };
  out.grad_norm = num("grad_norm", out.grad_norm);
  out.lr = float(num("lr", out.lr));
  out.packing_efficiency = num("packing_efficiency", out.packing_efficiency);
  out.aux_loss = num("aux_loss", out.aux_loss);
  const Json* clipped = u->find("clipped");
  out.clipped = clipped && clipped->is_bool() && clipped->as_bool();
  out.experts_routed = long(num("experts_routed", double(out.experts_routed)));
  out.experts_total = long(num("experts_total", double(out.experts_total)));
}
}  // namespace

Result<JobRecord> record_from_json(const Json& j) {
  if (!j.is_object()) return data_loss("job record is not an object");
  JobRecord r;
  auto str = [&](const char* k) { const Json* v = j.find(k); return v && v->is_string() ? v->as_string() : std::string(); };
  auto num = [&](const char* k) { const Json* v = j.find(k); return v && v->is_number() ? v->as_double() : 0.0; };
  auto i64 = [&](const char* k) { const Json* v = j.find(k); return v && v->is_number() ? v->as_int() : int64_t(0); };
  r.id = str("id");
  r.name = str("name");
  const std::string st = str("state");
  r.state = megatrain::v1::JOB_STATE_UNSPECIFIED;
  for (JobState s : {megatrain::v1::JOB_STATE_QUEUED, megatrain::v1::JOB_STATE_RUNNING,
                     megatrain::v1::JOB_STATE_SUCCEEDED, megatrain::v1::JOB_STATE_FAILED,
                     megatrain::v1::JOB_STATE_CANCELLED, megatrain::v1::JOB_STATE_PAUSED})
    if (st == state_name(s)) r.state = s;
  if (r.id.empty() || r.state == megatrain::v1::JOB_STATE_UNSPECIFIED)
    return data_loss("job record lacks an id or a known state");
  r.reason = str("reason");
  if (const Json* s = j.find("spec")) r.spec = *s;
  r.step = long(i64("step"));
  r.total_steps = long(i64("total_steps"));
  r.loss = num("loss");
  r.first_loss = num("first_loss");
  r.tokens_per_second = num("tokens_per_second");
  r.last_checkpoint = str("last_checkpoint");
  r.created_ms = i64("created_ms");
  r.started_ms = i64("started_ms");
  r.finished_ms = i64("finished_ms");
  r.consumed_tokens = uint64_t(std::max<int64_t>(0, i64("consumed_tokens")));
  r.consumed_checksum = std::strtoull(str("consumed_checksum").c_str(), nullptr, 10);
  r.spooled_tokens = uint64_t(std::max<int64_t>(0, i64("spooled_tokens")));
  const Json* cancel = j.find("cancel_requested");
  r.cancel_requested = cancel && cancel->is_bool() && cancel->as_bool();
  r.device_faults = int(std::max<int64_t>(0, i64("device_faults")));
  const Json* pause = j.find("pause_requested");
  r.pause_requested = pause && pause->is_bool() && pause->as_bool();
  r.preemptions = int(std::max<int64_t>(0, i64("preemptions")));
  r.eval = eval_progress_from_json(j);
  last_update_from_json(j.find("last_update"), r.last);
  return r;
}

Status save_record(const std::string& path, const JobRecord& r) {
  const std::string tmp = path + ".tmp";
  const std::string text = record_to_json(r).dump(2) + "\n";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
  if (fd < 0) return internal_error("cannot write '" + tmp + "'");
  bool ok = ::write(fd, text.data(), text.size()) == ssize_t(text.size()) && ::fsync(fd) == 0;
  ok = ::close(fd) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) return resource_exhausted("cannot write job record '" + path + "'");
  // The rename itself is durable only once the directory is synced (a power loss, not just a kill).
  return fsync_dir(std::filesystem::path(path).parent_path().string());
}

Result<JobRecord> load_record(const std::string& path) {
  MT_ASSIGN_OR_RETURN(std::string text, read_file(path));
  MT_ASSIGN_OR_RETURN(Json j, Json::parse(text));
  return record_from_json(j);
}

}  // namespace mt::server

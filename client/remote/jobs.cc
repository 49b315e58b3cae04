// submit, list, status, cancel, checkpoint and plan: one unary call each.
#include <cctype>
#include <cstdio>

#include "client/remote/commands.h"
#include "client/remote/format.h"
#include "engine/exec/executor.h"

namespace mt::cli {

namespace {

// The single positional argument (a job id or a spec path), or a usage error.
bool one_positional(const Args& a, const char* cmd, std::string& out, int& rc) {
  if (a.positional().size() != 1) {
    rc = usage_error(cmd);
    return false;
  }
  out = a.positional()[0];
  return true;
}

}  // namespace

int remote_submit(Connection& c, const Args& a) {
  std::string path;
  int rc = 0;
  if (!one_positional(a, "submit", path, rc)) return rc;
  auto spec = load_proto_spec(path);
  if (!spec.ok()) return fail(kUsage, spec.status().message());
  v1::SubmitJobRequest req;
  *req.mutable_spec() = *spec;
  if (a.has("priority")) {  // overrides the spec's
    auto p = a.integer("priority", 0, INT32_MIN, INT32_MAX);
    if (!p.ok()) return fail(kUsage, p.status().message());
    req.mutable_spec()->set_priority(int32_t(*p));
  }
  v1::SubmitJobResponse resp;
  auto ctx = c.context();
  if (grpc::Status s = c.stub().SubmitJob(ctx.get(), req, &resp); !s.ok()) return c.fail(s, "submit " + path);
  const v1::Job& job = resp.job();
  if (a.json()) {
    print_json(Json::object({{"event", "submitted"}, {"id", job.id()}, {"name", job.name()},
                             {"state", state_name(job.state())}, {"priority", job.priority()},
                             {"queue_position", job.queue_position()}, {"plan", plan_to_json(resp.plan())}}));
  } else {
    std::printf("%s\n", job.id().c_str());
    std::fflush(stdout);
    std::fprintf(stderr, "submitted %s as job %s: host %s (%.2f bytes/param), device %s\n", job.name().c_str(),
                 job.id().c_str(), human_bytes(resp.plan().host_bytes()).c_str(), resp.plan().host_bytes_per_param(),
                 human_bytes(resp.plan().device_bytes()).c_str());
  }
  // From the start: the job may have begun (and stepped) before the watch did.
  return a.has("watch") ? watch_job(c, job.id(), a.json(), /*from_start=*/true) : kOk;
}

int remote_list(Connection& c, const Args& a) {
  if (!a.positional().empty()) return usage_error("list");
  v1::ListJobsRequest req;
  if (a.has("state")) {
    std::string name = "JOB_STATE_" + a.get("state");
    for (char& ch : name) ch = char(std::toupper(static_cast<unsigned char>(ch)));
    v1::JobState st;
    if (!v1::JobState_Parse(name, &st))
      return fail(kUsage, "--state = '" + a.get("state") + "': use queued, running, paused, succeeded, failed or cancelled");
    req.set_state(st);
  }
  req.set_name(a.get("name"));
  req.set_page_size(1000);
  int shown = 0;
  do {  // every page
    v1::ListJobsResponse resp;
    auto ctx = c.context();
    if (grpc::Status s = c.stub().ListJobs(ctx.get(), req, &resp); !s.ok()) return c.fail(s, "list");
    for (const v1::Job& job : resp.jobs()) {
      if (a.json()) print_json(job_to_json(job, false));
      else print_job_row(job, shown == 0);
      ++shown;
    }
    req.set_page_token(resp.next_page_token());
  } while (!req.page_token().empty());
  if (!a.json() && shown == 0) std::printf("no jobs\n");
  return kOk;
}

int remote_status(Connection& c, const Args& a) {
  std::string id;
  int rc = 0;
  if (!one_positional(a, "status", id, rc)) return rc;
  v1::GetJobRequest req;
  req.set_job_id(id);
  v1::Job job;
  auto ctx = c.context();
  if (grpc::Status s = c.stub().GetJob(ctx.get(), req, &job); !s.ok()) return c.fail(s, "status " + id);
  if (a.json()) print_json(job_to_json(job, true));
  else print_job_human(job);
  return kOk;
}

int remote_cancel(Connection& c, const Args& a) {
  std::string id;
  int rc = 0;
  if (!one_positional(a, "cancel", id, rc)) return rc;
  v1::CancelJobRequest req;
  req.set_job_id(id);
  v1::Job job;
  auto ctx = c.context();
  if (grpc::Status s = c.stub().CancelJob(ctx.get(), req, &job); !s.ok()) return c.fail(s, "cancel " + id);
  if (a.json()) print_json(job_to_json(job, false));
  else std::printf("job %s: %s%s%s\n", job.id().c_str(), state_name(job.state()).c_str(),
                   job.reason().empty() ? "" : " - ", job.reason().c_str());
  return kOk;
}

// pause and resume: the job as the daemon answers (a running job's pause answers once the job has
// stopped at its next step boundary with a checkpoint: PAUSED, its step and that checkpoint).
int remote_pause_or_resume(Connection& c, const Args& a, bool pause) {
  const char* cmd = pause ? "pause" : "resume";
  std::string id;
  int rc = 0;
  if (!one_positional(a, cmd, id, rc)) return rc;
  v1::Job job;
  auto ctx = pause ? c.context(600) : c.context();  // a pause waits for the step and its checkpoint
  grpc::Status s;
  if (pause) {
    v1::PauseJobRequest req;
    req.set_job_id(id);
    s = c.stub().PauseJob(ctx.get(), req, &job);
  } else {
    v1::ResumeJobRequest req;
    req.set_job_id(id);
    s = c.stub().ResumeJob(ctx.get(), req, &job);
  }
  if (pause && s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)
    return c.fail(s, "pause " + id + " (the pause holds: the job stops at its next step boundary with a checkpoint; "
                     "megatrain status " + id + " shows when it is PAUSED)");
  if (!s.ok()) return c.fail(s, std::string(cmd) + " " + id);
  if (a.json()) print_json(job_to_json(job, false));
  else std::printf("job %s: %s%s%s\n", job.id().c_str(), state_name(job.state()).c_str(),
                   job.reason().empty() ? "" : " - ", job.reason().c_str());
  return kOk;
}

int remote_pause(Connection& c, const Args& a) { return remote_pause_or_resume(c, a, true); }
int remote_resume(Connection& c, const Args& a) { return remote_pause_or_resume(c, a, false); }

int remote_delete(Connection& c, const Args& a) {
  std::string id;
  int rc = 0;
  if (!one_positional(a, "delete", id, rc)) return rc;
  v1::DeleteJobRequest req;
  req.set_job_id(id);
  req.set_keep_checkpoints(a.has("keep-checkpoints"));
  v1::DeleteJobResponse resp;
  auto ctx = c.context();
  if (grpc::Status s = c.stub().DeleteJob(ctx.get(), req, &resp); !s.ok()) return c.fail(s, "delete " + id);
  if (a.json())
    print_json(Json::object({{"id", resp.job_id()}, {"deleted", true}, {"freed_bytes", int64_t(resp.freed_bytes())},
                             {"kept_checkpoints", resp.kept_checkpoints()}}));
  else std::printf("job %s deleted (%s freed)%s%s\n", resp.job_id().c_str(), human_bytes(resp.freed_bytes()).c_str(),
                   resp.kept_checkpoints().empty() ? "" : "; checkpoints kept in ", resp.kept_checkpoints().c_str());
  return kOk;
}

int remote_checkpoint(Connection& c, const Args& a) {
  std::string id;
  int rc = 0;
  if (!one_positional(a, "checkpoint", id, rc)) return rc;
  v1::CheckpointRequest req;
  req.set_job_id(id);
  v1::CheckpointResponse resp;
  auto ctx = c.context(600);  // written at the job's next step boundary
  if (grpc::Status s = c.stub().Checkpoint(ctx.get(), req, &resp); !s.ok()) return c.fail(s, "checkpoint " + id);
  if (a.json())
    print_json(Json::object({{"id", resp.job_id()}, {"checkpoint", resp.checkpoint()}, {"step", int64_t(resp.step())}}));
  else std::printf("job %s: checkpoint at step %lld in %s\n", resp.job_id().c_str(), (long long)resp.step(),
                   resp.checkpoint().c_str());
  return kOk;
}

int remote_plan(Connection& c, const Args& a) {
  std::string path;
  int rc = 0;
  if (!one_positional(a, "plan", path, rc)) return rc;
  // The server plans against its own budgets and devices: an offline flag would be dropped
  // silently (a defect hunt's --host-memory 1KB got "fits yes").
  for (const char* offline : {"host-memory", "device-memory", "processes", "shard-optimizer", "offload", "nvme-paths",
                              "nvme-masters", "nvme-grad-window", "nvme-gbps", "device-tflops"})
    if (a.has(offline))
      return fail(kUsage, std::string("--") + offline + " is an offline plan's: a plan against a server (--server or "
                                                        "MEGATRAIN_SERVER) uses the server's budgets; without a server "
                                                        "the plan is offline");
  auto spec = load_proto_spec(path);
  if (!spec.ok()) return fail(kUsage, spec.status().message());
  v1::PlanJobRequest req;
  *req.mutable_spec() = *spec;
  if (a.has("seq-len") && a.has("max-seq-len")) return fail(kUsage, "--seq-len and --max-seq-len exclude each other");
  if (a.has("seq-len")) {
    auto t = a.integer("seq-len", 0, 1, TrainLimits::kSeqLen);
    if (!t.ok()) return fail(kUsage, t.status().message());
    req.mutable_spec()->set_seq_len(int(*t));
  }
  req.set_max_seq_len(a.has("max-seq-len"));
  v1::PlanJobResponse resp;
  auto ctx = c.context();
  if (grpc::Status s = c.stub().PlanJob(ctx.get(), req, &resp); !s.ok()) return c.fail(s, "plan " + path);
  if (a.json()) {
    Json j = plan_to_json(resp.plan());
    j.set("seq_len", resp.seq_len());
    if (resp.max_seq_len()) j.set("max_seq_len", resp.max_seq_len());
    print_json(j);
  } else {
    if (resp.max_seq_len()) std::printf("max seq_len    %d (the longest that fits the server's budgets)\n", resp.max_seq_len());
    print_plan_human(resp.plan());
  }
  // RESOURCE_EXHAUSTED's code, as submit's refusal, with the error object --json promises
  return resp.plan().fits() ? kOk : fail(kUsage, "the plan does not fit: " + resp.plan().reason());
}

}  // namespace mt::cli

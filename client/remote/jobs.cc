// submit, list, status, cancel, checkpoint and plan: one unary call each.
#include <cctype>
#include <cstdio>

#include "client/remote/commands.h"
#include "client/remote/format.h"

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
  v1::SubmitJobResponse resp;
  auto ctx = c.context();
  if (grpc::Status s = c.stub().SubmitJob(ctx.get(), req, &resp); !s.ok()) return c.fail(s, "submit " + path);
  const v1::Job& job = resp.job();
  if (a.json()) {
    print_json(Json::object({{"event", "submitted"}, {"id", job.id()}, {"name", job.name()},
                             {"state", state_name(job.state())}, {"plan", plan_to_json(resp.plan())}}));
  } else {
    std::printf("%s\n", job.id().c_str());
    std::fflush(stdout);
    std::fprintf(stderr, "submitted %s as job %s: host %s (%.2f bytes/param), device %s\n", job.name().c_str(),
                 job.id().c_str(), human_bytes(resp.plan().host_bytes()).c_str(), resp.plan().host_bytes_per_param(),
                 human_bytes(resp.plan().device_bytes()).c_str());
  }
  return a.has("watch") ? watch_job(c, job.id(), a.json()) : kOk;
}

int remote_list(Connection& c, const Args& a) {
  if (!a.positional().empty()) return usage_error("list");
  v1::ListJobsRequest req;
  if (a.has("state")) {
    std::string name = "JOB_STATE_" + a.get("state");
    for (char& ch : name) ch = char(std::toupper(static_cast<unsigned char>(ch)));
    v1::JobState st;
    if (!v1::JobState_Parse(name, &st))
      return fail(kUsage, "--state = '" + a.get("state") + "': use queued, running, succeeded, failed or cancelled");
    req.set_state(st);
  }
  v1::ListJobsResponse resp;
  auto ctx = c.context();
  if (grpc::Status s = c.stub().ListJobs(ctx.get(), req, &resp); !s.ok()) return c.fail(s, "list");
  for (int i = 0; i < resp.jobs_size(); ++i) {
    if (a.json()) print_json(job_to_json(resp.jobs(i), false));
    else print_job_row(resp.jobs(i), i == 0);
  }
  if (!a.json() && resp.jobs_size() == 0) std::printf("no jobs\n");
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
  auto spec = load_proto_spec(path);
  if (!spec.ok()) return fail(kUsage, spec.status().message());
  v1::PlanJobRequest req;
  *req.mutable_spec() = *spec;
  v1::PlanJobResponse resp;
  auto ctx = c.context();
  if (grpc::Status s = c.stub().PlanJob(ctx.get(), req, &resp); !s.ok()) return c.fail(s, "plan " + path);
  if (a.json()) print_json(plan_to_json(resp.plan()));
  else print_plan_human(resp.plan());
  return kOk;
}

}  // namespace mt::cli

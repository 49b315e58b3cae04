#include "server/service.h"

#include <algorithm>

#include "server/event_history.h"
#include "server/log_stream.h"
#include "server/status_map.h"
#include "server/watch_backlog.h"

namespace mt::server {

namespace {

grpc::ServerUnaryReactor* finish(grpc::CallbackServerContext* ctx, const grpc::Status& s) {
  grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
  r->Finish(s);
  return r;
}

// Streams a job's events; finishes after the first terminal state.
class WatchReactor final : public grpc::ServerWriteReactor<v1::JobEvent> {
 public:
  explicit WatchReactor(JobManager& jobs) : jobs_(jobs), sink_(std::make_shared<Sink>()) { sink_->r = this; }

  void start(StreamSlots::Slot slot, const std::string& id, bool from_start) {
    slot_ = std::move(slot);
    auto token = jobs_.watch(id, [sink = sink_](const v1::JobEvent& ev) { sink->push(ev); }, from_start);
    std::lock_guard<std::mutex> lock(sink_->mu);
    if (!token.ok()) {
      sink_->finished = true;
      Finish(to_grpc(token.status()));
      return;
    }
    token_ = *token;
  }
  void fail(const grpc::Status& s) {
    std::lock_guard<std::mutex> lock(sink_->mu);
    sink_->finished = true;
    Finish(s);
  }
  void OnWriteDone(bool ok) override { sink_->write_done(ok); }
  void OnCancel() override {
    std::lock_guard<std::mutex> lock(sink_->mu);
    if (!sink_->finished) {
      sink_->finished = true;
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
    }
  }
  void OnDone() override {
    uint64_t token;
    {
      std::lock_guard<std::mutex> lock(sink_->mu);
      sink_->r = nullptr;
      token = token_;
    }
    if (token) jobs_.unwatch(token);
    delete this;
  }

 private:
  // Shared with the job manager's listener; outlives the reactor safely (r = nullptr once done).
  struct Sink {
    std::mutex mu;
    WatchReactor* r = nullptr;
    // Room for a whole replay (a watch from_start) and 256 live events after it.
    WatchBacklog queue{EventHistory::kPerJob + 256};
    v1::JobEvent current;
    bool writing = false, finished = false;

    void push(const v1::JobEvent& ev) {
      std::lock_guard<std::mutex> lock(mu);
      if (!r || finished) return;
      queue.push(ev);
      if (!writing) next();
    }
    void next() {
      if (queue.empty()) {
        writing = false;
        return;
      }
      current = queue.pop();
      writing = true;
      r->StartWrite(&current);
    }
    void write_done(bool ok) {
      std::lock_guard<std::mutex> lock(mu);
      if (!r || finished) return;
      if (!ok || terminal(current.state())) {
        finished = true;
        r->Finish(grpc::Status::OK);
        return;
      }
      next();
    }
  };

  JobManager& jobs_;
  std::shared_ptr<Sink> sink_;
  StreamSlots::Slot slot_;  // freed when the reactor is deleted
  uint64_t token_ = 0;
};

// A push id: 1 to 128 printable ASCII characters.
bool valid_push_id(const std::string& id) {
  return !id.empty() && id.size() <= 128 &&
         std::all_of(id.begin(), id.end(), [](char c) { return c > ' ' && c < 127; });
}

// Spools each chunk durably before reading the next; replies with the counts at the end. With a
// push id, chunks carry their offset in the push and what an earlier try spooled is skipped.
class PushReactor final : public grpc::ServerReadReactor<v1::PushDataRequest> {
 public:
  PushReactor(JobManager& jobs, v1::PushDataResponse* resp) : jobs_(jobs), resp_(resp) {}
  void start(StreamSlots::Slot slot) {
    slot_ = std::move(slot);
    StartRead(&req_);
  }
  void fail(const grpc::Status& s) { Finish(s); }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client closed its side (or went away): every chunk read is spooled
      Finish(grpc::Status::OK);
      return;
    }
    const std::string where = "chunk " + std::to_string(chunks_) + " (" + std::to_string(resp_->chunks_accepted()) +
                              " earlier chunks accepted): ";
    if (grpc::Status bad = take_names(); !bad.ok()) {
      Finish({bad.error_code(), clip_message(where + bad.error_message())});
      return;
    }
    PushAt at;
    if (!push_id_.empty()) at = {push_key(push_id_), req_.offset()};
    auto ack = jobs_.push(job_id_, req_.tokens().data(), size_t(req_.tokens_size()), at);
    if (!ack.ok()) {
      Finish(grpc::Status(to_grpc_code(ack.status().code()), clip_message(where + ack.status().message())));
      return;
    }
    ++chunks_;
    next_offset_ = req_.offset() + uint64_t(req_.tokens_size());
    resp_->set_chunks_accepted(resp_->chunks_accepted() + 1);
    resp_->set_tokens_accepted(resp_->tokens_accepted() + uint64_t(req_.tokens_size()));
    resp_->set_spooled_tokens(ack->spooled);
    if (!push_id_.empty()) resp_->set_push_committed_tokens(ack->committed);
    StartRead(&req_);
  }
  void OnDone() override { delete this; }

 private:
  // The stream's job and push id (named on the first chunk, the same or empty after) and the
  // chunk's offset (following on from the previous chunk).
  grpc::Status take_names() {
    const bool first = chunks_ == 0;
    if (!req_.job_id().empty()) {
      if (!job_id_.empty() && req_.job_id() != job_id_)
        return {grpc::StatusCode::INVALID_ARGUMENT,
                "job_id = '" + req_.job_id() + "' differs from the stream's job '" + job_id_ + "'"};
      job_id_ = req_.job_id();
    }
    if (job_id_.empty())
      return {grpc::StatusCode::INVALID_ARGUMENT, "job_id is empty (the first chunk must name the job)"};
    if (!req_.push_id().empty() && req_.push_id() != push_id_) {
      if (!first) return {grpc::StatusCode::INVALID_ARGUMENT, "push_id may be set only on the first chunk of a stream"};
      if (!valid_push_id(req_.push_id()))
        return {grpc::StatusCode::INVALID_ARGUMENT, "push_id must be 1 to 128 printable ASCII characters"};
      push_id_ = req_.push_id();
    }
    if (push_id_.empty() && req_.offset() != 0)
      return {grpc::StatusCode::INVALID_ARGUMENT, "offset = " + std::to_string(req_.offset()) + " needs a push_id"};
    if (!first && !push_id_.empty() && req_.offset() != next_offset_)
      return {grpc::StatusCode::INVALID_ARGUMENT, "offset = " + std::to_string(req_.offset()) +
                                                      " does not follow on from the previous chunk (expected " +
                                                      std::to_string(next_offset_) + ")"};
    return grpc::Status::OK;
  }

  JobManager& jobs_;
  v1::PushDataResponse* resp_;
  v1::PushDataRequest req_;
  std::string job_id_, push_id_;
  StreamSlots::Slot slot_;  // freed when the reactor is deleted
  uint64_t chunks_ = 0, next_offset_ = 0;
};

}  // namespace

namespace {
// A core call's result into the response, and its status into gRPC's.
template <typename T, typename Out>
grpc::Status reply(Result<T> r, Out* out) {
  if (r.ok()) *out = std::move(r).value();
  return to_grpc(r.status());
}
}  // namespace

template <typename Handler>
grpc::ServerUnaryReactor* TrainerService::unary(grpc::CallbackServerContext* ctx, const char* rpc, Role needed,
                                                Handler&& handler) {
  if (auto a = auth_.authorize(*ctx, rpc, needed); !a.ok()) return finish(ctx, a);
  return finish(ctx, handler());
}

grpc::ServerUnaryReactor* TrainerService::SubmitJob(grpc::CallbackServerContext* ctx, const v1::SubmitJobRequest* req,
                                                    v1::SubmitJobResponse* resp) {
  return unary(ctx, "SubmitJob", Role::kAdmin, [&] { return reply(jobs_.submit(req->spec()), resp); });
}

grpc::ServerUnaryReactor* TrainerService::GetJob(grpc::CallbackServerContext* ctx, const v1::GetJobRequest* req,
                                                 v1::Job* resp) {
  return unary(ctx, "GetJob", Role::kRead, [&] { return reply(jobs_.get(req->job_id()), resp); });
}

grpc::ServerUnaryReactor* TrainerService::ListJobs(grpc::CallbackServerContext* ctx, const v1::ListJobsRequest* req,
                                                   v1::ListJobsResponse* resp) {
  return unary(ctx, "ListJobs", Role::kRead, [&] { return reply(jobs_.list(*req), resp); });
}

grpc::ServerUnaryReactor* TrainerService::CancelJob(grpc::CallbackServerContext* ctx, const v1::CancelJobRequest* req,
                                                    v1::Job* resp) {
  return unary(ctx, "CancelJob", Role::kAdmin, [&] { return reply(jobs_.cancel(req->job_id()), resp); });
}

grpc::ServerWriteReactor<v1::JobEvent>* TrainerService::WatchJob(grpc::CallbackServerContext* ctx,
                                                                 const v1::WatchJobRequest* req) {
  auto* r = new WatchReactor(jobs_);
  if (auto a = auth_.authorize(*ctx, "WatchJob", Role::kRead); !a.ok()) return r->fail(a), r;
  auto slot = streams_.take("WatchJob");
  if (!slot.ok()) return r->fail(to_grpc(slot.status())), r;
  r->start(std::move(*slot), req->job_id(), req->from_start());
  return r;
}

grpc::ServerReadReactor<v1::PushDataRequest>* TrainerService::PushData(grpc::CallbackServerContext* ctx,
                                                                       v1::PushDataResponse* resp) {
  auto* r = new PushReactor(jobs_, resp);
  if (auto a = auth_.authorize(*ctx, "PushData", Role::kAdmin); !a.ok()) return r->fail(a), r;
  auto slot = pushes_.take("PushData");
  if (!slot.ok()) return r->fail(to_grpc(slot.status())), r;
  r->start(std::move(*slot));
  return r;
}

grpc::ServerUnaryReactor* TrainerService::Checkpoint(grpc::CallbackServerContext* ctx,
                                                     const v1::CheckpointRequest* req, v1::CheckpointResponse* resp) {
  if (auto a = auth_.authorize(*ctx, "Checkpoint", Role::kAdmin); !a.ok()) return finish(ctx, a);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const std::string id = req->job_id();
  Status st = jobs_.checkpoint(id, [reactor, resp, id](const Status& s, const std::string& dir, long step) {
    if (s.ok()) {
      resp->set_job_id(id);
      resp->set_checkpoint(dir);
      resp->set_step(step);
    }
    reactor->Finish(to_grpc(s));
  });
  if (!st.ok()) reactor->Finish(to_grpc(st));
  return reactor;
}

namespace {
// A plan reads what its spec names under the data root (a model's config.json, data, init.from,
// NVMe directories), and its refusals can quote it: that takes the role that may submit such a
// spec. A plan of a preset on synthetic data (a dashboard's what-if) is read's.
Role plan_role(const v1::JobSpec& s) {
  const auto names_files = [](const v1::DataSpec& d) {
    return !d.path().empty() || (!d.tokenizer().empty() && d.tokenizer() != "byte");
  };
  const bool files = !s.model().hf_config().empty() || !s.model().hf_model().empty() || !s.init().from().empty() ||
                     names_files(s.data()) || (s.has_eval() && names_files(s.eval().data())) ||
                     s.memory().nvme_paths_size() > 0;
  return files ? Role::kAdmin : Role::kRead;
}
}  // namespace

grpc::ServerUnaryReactor* TrainerService::PlanJob(grpc::CallbackServerContext* ctx, const v1::PlanJobRequest* req,
                                                  v1::PlanJobResponse* resp) {
  return unary(ctx, "PlanJob", plan_role(req->spec()), [&] { return reply(jobs_.plan(*req), resp); });
}

// ---- Scheduling and housekeeping (issue 17) ----------------------------------------------------

grpc::ServerUnaryReactor* TrainerService::PauseJob(grpc::CallbackServerContext* ctx, const v1::PauseJobRequest* req,
                                                   v1::Job* resp) {
  if (auto a = auth_.authorize(*ctx, "PauseJob", Role::kAdmin); !a.ok()) return finish(ctx, a);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  Status st = jobs_.pause(req->job_id(), [reactor, resp](const Status& s, const v1::Job& job) {
    if (s.ok()) *resp = job;
    reactor->Finish(to_grpc(s));
  });
  if (!st.ok()) reactor->Finish(to_grpc(st));
  return reactor;
}

grpc::ServerUnaryReactor* TrainerService::ResumeJob(grpc::CallbackServerContext* ctx, const v1::ResumeJobRequest* req,
                                                    v1::Job* resp) {
  return unary(ctx, "ResumeJob", Role::kAdmin, [&] { return reply(jobs_.resume(req->job_id()), resp); });
}

grpc::ServerUnaryReactor* TrainerService::DeleteJob(grpc::CallbackServerContext* ctx, const v1::DeleteJobRequest* req,
                                                    v1::DeleteJobResponse* resp) {
  return unary(ctx, "DeleteJob", Role::kAdmin,
               [&] { return reply(jobs_.remove(req->job_id(), req->keep_checkpoints()), resp); });
}

grpc::ServerWriteReactor<v1::StreamLogsResponse>* TrainerService::StreamLogs(grpc::CallbackServerContext* ctx,
                                                                             const v1::StreamLogsRequest* req) {
  // A job's log is for any reader; the daemon's own log (empty job_id or "daemon") for admins.
  const bool daemon_log = req->job_id().empty() || req->job_id() == "daemon";
  grpc::Status refused = auth_.authorize(*ctx, "StreamLogs", daemon_log ? Role::kAdmin : Role::kRead);
  std::shared_ptr<LogFile> log;
  StreamSlots::Slot slot;
  if (refused.ok()) {
    auto s = streams_.take("StreamLogs");
    if (s.ok()) slot = std::move(*s);
    else refused = to_grpc(s.status());
  }
  if (refused.ok()) {
    auto l = jobs_.log(req->job_id());
    if (l.ok()) log = *l;
    else refused = to_grpc(l.status());
  }
  return stream_logs(refused, std::move(log), *req, std::move(slot));
}

grpc::ServerUnaryReactor* TrainerService::ListCheckpoints(grpc::CallbackServerContext* ctx,
                                                          const v1::ListCheckpointsRequest* req,
                                                          v1::ListCheckpointsResponse* resp) {
  return unary(ctx, "ListCheckpoints", Role::kRead, [&] {
    auto job = jobs_.files(req->job_id());
    return job.ok() ? reply(list_job_checkpoints(job->dir), resp) : to_grpc(job.status());
  });
}

grpc::ServerUnaryReactor* TrainerService::ExportModel(grpc::CallbackServerContext* ctx,
                                                      const v1::ExportModelRequest* req,
                                                      v1::ExportModelResponse* resp) {
  return unary(ctx, "ExportModel", Role::kAdmin, [&] {
    auto job = jobs_.files(req->job_id());
    return job.ok() ? reply(exporter_.run(*job, *req), resp) : to_grpc(job.status());
  });
}

}  // namespace mt::server

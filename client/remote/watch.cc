// watch ID [--from-start]: follows a job's WatchJob stream with the shared progress display (from
// the steps the daemon still holds with --from-start), then a summary.
#include "client/progress.h"
#include "client/remote/commands.h"
#include "client/remote/format.h"

namespace mt::cli {

namespace {

ProgressEvent progress_of(const v1::JobEvent& ev) {
  return {.step = long(ev.step()), .steps = long(ev.total_steps()), .loss = ev.loss(),
          .tokens_per_second = ev.tokens_per_second(), .step_seconds = ev.step_seconds(), .h2d_gbps = ev.h2d_gbps(),
          .d2h_gbps = ev.d2h_gbps(), .eta_seconds = ev.eta_seconds(), .grad_norm = ev.grad_norm(),
          .learning_rate = ev.learning_rate(), .grad_clipped = ev.grad_clipped(),
          .aux_loss = ev.has_aux_loss() ? ev.aux_loss() : -1, .experts_routed = long(ev.experts_routed()),
          .experts_total = long(ev.experts_total())};
}

// What the stream tells us, event by event; returns the last state seen.
class Follower {
 public:
  explicit Follower(bool json) : progress_(json) {}

  void on_event(const v1::JobEvent& ev) {
    state_ = ev.state();
    last_ = ev;
    if (!ev.message().empty()) {
      progress_.message(ev.message());
    } else if (ev.has_eval_loss()) {
      progress_.eval({long(ev.step()), ev.eval_loss(), ev.eval_best(), long(ev.best_eval_step()), ev.best_eval_loss()});
    } else if (!ev.checkpoint().empty()) {
      checkpoint_ = ev.checkpoint();  // the job's log line has already said where
    } else if (ev.state() == v1::JOB_STATE_RUNNING && ev.step() > last_step_) {
      last_step_ = ev.step();
      progress_.step(progress_of(ev));
    } else if (ev.state() == v1::JOB_STATE_QUEUED && !announced_queue_) {
      announced_queue_ = true;
      progress_.message("job " + ev.job_id() + " is queued");
    }
    if (ev.waiting_for_data() != waiting_ && !terminal(ev.state())) {
      waiting_ = ev.waiting_for_data();
      if (waiting_) progress_.message("job " + ev.job_id() + " is waiting for data (megatrain push)");
    }
  }

  // The last object: from the job record when the daemon still answers, else from the stream.
  void summary(const v1::Job* job) {
    Json fields = Json::object();
    fields.set("job", last_.job_id());
    fields.set("state", state_name(state_));
    fields.set("steps", int64_t(job ? job->step() : last_.step()));
    fields.set("final_loss", job ? job->loss() : last_.loss());
    // The run's mean, as `megatrain train` reports it; the last step's when the daemon has no mean
    fields.set("tokens_per_second", job && job->has_mean_tokens_per_second() ? job->mean_tokens_per_second()
                                    : job                                  ? job->tokens_per_second()
                                                                           : last_.tokens_per_second());
    if (job && job->has_packing_efficiency()) fields.set("packing_efficiency", job->packing_efficiency());
    fields.set("checkpoint", job && !job->last_checkpoint().empty() ? job->last_checkpoint() : checkpoint_);
    fields.set("cancelled", state_ == v1::JOB_STATE_CANCELLED);
    if (job && job->eval_step() > 0) {  // the keys of `megatrain train`'s summary
      fields.set("eval_step", int64_t(job->eval_step()));
      fields.set("eval_loss", job->eval_loss());
      fields.set("best_eval_loss", job->best_eval_loss());
      fields.set("best_eval_step", int64_t(job->best_eval_step()));
    }
    const std::string reason = job ? job->reason() : last_.reason();
    if (!reason.empty()) fields.set("reason", reason);
    progress_.summary(fields);
  }

  v1::JobState state() const { return state_; }

 private:
  Progress progress_;
  v1::JobEvent last_;
  v1::JobState state_ = v1::JOB_STATE_UNSPECIFIED;
  std::string checkpoint_;
  long last_step_ = 0;
  bool announced_queue_ = false, waiting_ = false;
};

}  // namespace

int watch_job(Connection& c, const std::string& id, bool json, bool from_start) {
  v1::WatchJobRequest req;
  req.set_job_id(id);
  req.set_from_start(from_start);
  auto ctx = c.context(0);  // as long as the job runs
  auto reader = c.stub().WatchJob(ctx.get(), req);
  Follower follow(json);
  v1::JobEvent ev;
  while (reader->Read(&ev)) {
    follow.on_event(ev);
    if (terminal(follow.state())) {  // the job is over; do not wait for the trailer
      ctx->TryCancel();
      break;
    }
  }
  grpc::Status s = reader->Finish();
  if (!terminal(follow.state())) {
    if (s.ok()) s = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the watch ended before the job did");
    return c.fail(s, "watch " + id);
  }
  v1::GetJobRequest get;
  get.set_job_id(id);
  v1::Job job;
  auto gctx = c.context(10);
  const bool have_job = c.stub().GetJob(gctx.get(), get, &job).ok();
  follow.summary(have_job ? &job : nullptr);
  return follow.state() == v1::JOB_STATE_SUCCEEDED ? kOk : kJobFailed;
}

int remote_watch(Connection& c, const Args& a) {
  if (a.positional().size() != 1) return usage_error("watch");
  return watch_job(c, a.positional()[0], a.json(), a.has("from-start"));
}

}  // namespace mt::cli

#include "server/job_manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

#include "engine/base/confined_open.h"
#include "engine/io/safetensors.h"  // fsync_dir
#include "server/job_housekeeping.h"
#include "server/managed_job.h"

namespace mt::server {

namespace fs = std::filesystem;


JobManager::JobManager(Options opt, Metrics& metrics) : opt_(std::move(opt)), metrics_(metrics) {}

JobManager::~JobManager() {
  if (started_ && !worker_done_) shutdown(std::chrono::milliseconds(60000));
  if (worker_.joinable()) worker_.join();
}

Status JobManager::prepare(Job& job) {
  MT_ASSIGN_OR_RETURN(job.cfg, resolve_model(job.spec));
  auto plan = plan_job(job.spec, job.cfg, opt_.budgets);
  if (!plan.ok()) return plan.status();
  job.plan = *plan;
  job.flops_per_token = model_flops_per_token(job.cfg, job.spec.train.seq_len);
  std::error_code ec;
  fs::create_directories(job.dir, ec);
  if (ec) return internal_error("cannot create '" + job.dir + "': " + ec.message());
  if (job.spec.data.source == "push" && !job.spool) {
    MT_ASSIGN_OR_RETURN(job.spool, PushSpool::open(job.dir + "/push.spool"));
  }
  if (!job.log) {
    MT_ASSIGN_OR_RETURN(job.log, LogFile::open(job.dir + "/log.txt", opt_.log_file_bytes));
  }
  return Status::Ok();
}

Status JobManager::start() {
  std::error_code ec;
  fs::create_directories(opt_.state_dir + "/jobs", ec);
  if (ec) return internal_error("cannot create the state dir '" + opt_.state_dir + "': " + ec.message());
  // Every open of a path inside these stays inside them, whatever symlink a shard or model
  // directory holds or is swapped for while a job runs (the submit checked only the spec's own).
  std::vector<std::string> roots;
  for (const std::string& r : spec_roots())
    if (!r.empty()) roots.push_back(r);
  roots.insert(roots.end(), opt_.nvme_paths.begin(), opt_.nvme_paths.end());
  MT_RETURN_IF_ERROR(confine_opens_to(roots));
  std::vector<std::shared_ptr<Job>> resume, queued;
  next_id_ = std::max(next_id_, last_issued_id(opt_.state_dir) + 1);
  for (const auto& entry : fs::directory_iterator(opt_.state_dir + "/jobs")) {
    if (is_being_deleted(entry.path())) {  // a DeleteJob the daemon did not finish: finish it
      fs::remove_all(entry.path(), ec);
      continue;
    }
    if (!fs::exists(entry.path() / "job.json")) continue;
    auto job = load_job(entry.path().string());
    if (!job.ok()) {
      spdlog::warn("skipping job dir {}: {}", entry.path().string(), job.status().to_string());
      continue;
    }
    auto j = *job;
    restore_metrics(*j);  // the record as the restart left it (rewound, paused, cancelled)
    next_id_ = std::max(next_id_, job_number(j->rec.id) + 1);
    if (j->rec.state == v1::JOB_STATE_RUNNING) resume.push_back(j);
    else if (j->rec.state == v1::JOB_STATE_QUEUED) queued.push_back(j);
    jobs_[j->rec.id] = j;
  }
  std::unique_lock<std::mutex> lock(mu_);
  queue_.reserve_order(next_id_);
  for (auto& j : resume) {  // back in their place: priority, then submission order
    spdlog::info("job {} was interrupted at step {}; resuming it", j->rec.id, j->rec.step);
    j->log->append("info", "interrupted at step " + std::to_string(j->rec.step) + "; resuming after a daemon restart");
    j->rec.state = v1::JOB_STATE_QUEUED;
    j->rec.reason.clear();  // older daemons saved "interrupted ..." here
    queue_.push(j->rec.id, j->priority, j->order);
  }
  for (auto& j : queued) queue_.push(j->rec.id, j->priority, j->order);
  for (auto& [id, j] : jobs_)  // what each push job's spool holds and it has not trained on
    if (j->spool) metrics_.set_data_queue(id, double(j->spool->tokens() - j->progress->consumed));
  update_job_metrics();
  started_ = true;
  worker_ = std::thread([this] { worker(); });
  lock.unlock();
  sweep_retention();
  refresh_disk_usage();
  return Status::Ok();
}

bool JobManager::shutdown(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  stopping_ = true;
  if (running_) {
    if (running_->runner) running_->runner->request_cancel();
    if (running_->spool) running_->spool->stop();
  }
  cv_.notify_all();
  if (!worker_done_cv_.wait_for(lock, timeout, [&] { return worker_done_; })) return false;
  lock.unlock();
  if (worker_.joinable()) worker_.join();
  return true;
}

void JobManager::worker() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      for (;;) {  // while idle, records that could not be saved are tried again every second
        resave_unsaved();
        if (stopping_ || !queue_.empty()) break;
        if (unsaved_.empty()) cv_.wait(lock);
        else cv_.wait_for(lock, std::chrono::seconds(1));
      }
      if (stopping_) break;
    }
    std::unique_lock<std::mutex> ordered = order();  // the start and its RUNNING event, as one change
    std::shared_ptr<Job> job;
    v1::JobEvent ev;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) break;
      if (queue_.empty()) continue;  // left the queue while the worker took order()
      const auto it = jobs_.find(queue_.pop());
      if (it == jobs_.end() || it->second->rec.terminal()) continue;  // cancelled or deleted while queued
      job = it->second;
      job->rec.state = v1::JOB_STATE_RUNNING;
      if (!job->rec.started_ms) job->rec.started_ms = now_ms();
      running_ = job;
      job->log->append("info", "running");
      (void)save(*job);
      update_job_metrics();
      metrics_.set_memory(&job->plan);
      ev = event_of(*job);
    }
    deliver(ordered, job->rec.id, ev);
    ordered.unlock();
    run_job(job);
  }
  std::lock_guard<std::mutex> lock(mu_);
  worker_done_ = true;
  worker_done_cv_.notify_all();
}

// Where spec paths may resolve: the data root, and other jobs' directories (init.from can name a
// job's checkpoint there).
std::vector<std::string> JobManager::spec_roots() const { return {opt_.data_root, opt_.state_dir + "/jobs"}; }

void JobManager::run_job(const std::shared_ptr<Job>& job) {
  if (Status moved = recheck_spec_paths(job->spec, spec_roots(), opt_.nvme_paths); !moved.ok())
    return finish_job(job, moved);
  const JobHooks hooks = hooks_for(job);
  JobRunner runner(job->spec, job->dir, hooks, opt_.budgets.device, opt_.budgets.host);  // the budgets it was admitted under
  {
    std::lock_guard<std::mutex> lock(mu_);
    job->runner = &runner;  // what was asked while it was made, it is asked now
    if (job->rec.cancel_requested || job->stopping_to_wait() || stopping_)
      runner.request_cancel();
    if (!job->ckpt_waiters.empty()) runner.request_checkpoint();
  }
  Result<JobResult> res = opt_.run_job ? opt_.run_job(runner) : runner.run();
  finish_job(job, res);
}

void JobManager::finish_job(const std::shared_ptr<Job>& job, const Result<JobResult>& res) {
  std::vector<CheckpointDone> waiters;
  std::vector<JobDone> stopped_waiters;
  v1::JobEvent ev;
  v1::Job ended;
  std::unique_lock<std::mutex> ordered = order();
  {
    std::lock_guard<std::mutex> lock(mu_);
    job->runner = nullptr;
    running_.reset();
    JobRecord& r = job->rec;
    const bool stopped = !res.ok() ? res.status().code() == StatusCode::kCancelled : res->cancelled || res->starved;
    std::string message;
    if (stopping_ && stopped && !r.cancel_requested) {
      // Still RUNNING in its record; the reason stays empty (it is for failed or cancelled jobs).
      message = "interrupted by a daemon shutdown at step " + std::to_string(r.step) + "; resumes on restart";
    } else if (!res.ok() && res.status().code() == StatusCode::kDeviceLost) {
      message = lose_device(*job, res.status());
    } else if (res.ok() && res->starved && !r.cancel_requested && !r.pause_requested) {
      message = park(*job, *res);
    } else if (res.ok() && (res->cancelled || res->starved) && !r.cancel_requested &&
               job->stopping_to_wait()) {  // starved: a pause came as it yielded
      message = requeue(*job, *res);
    } else {
      message = settle(*job, res);
    }
    job->preempted_by.clear();
    job->resumed_while_pausing = false;
    job->log->append(r.state == v1::JOB_STATE_FAILED ? "error" : "info", std::string("job ") + state_name(r.state) + ": " + message);
    (void)save(*job);  // closes the log of a job that ended, after that last line
    waiters.swap(job->ckpt_waiters);
    stopped_waiters.swap(job->stop_waiters);
    update_job_metrics();
    metrics_.set_memory(nullptr);
    ev = event_of(*job);
    ev.set_message(message);
    ended = to_proto(*job);
  }
  deliver(ordered, job->rec.id, ev);  // before the answers: a watch begun on a pause's answer sees PAUSED once
  ordered.unlock();
  for (auto& w : waiters) w(Status(StatusCode::kFailedPrecondition, "the job stopped before the checkpoint"), "", 0);
  const Status outcome = pause_outcome(ended);
  for (auto& w : stopped_waiters) w(outcome, ended);
  sweep_retention();
  refresh_disk_usage();
}

// The daemon stops: no job starts again, the running one stops at its next step boundary, and
// every call waiting on it is answered now (the server's shutdown waits for each call to end).
void JobManager::begin_stop() {
  std::vector<CheckpointDone> checkpoints;
  std::vector<JobDone> pauses;
  v1::Job job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (running_) {
      if (running_->runner) running_->runner->request_cancel();
      if (running_->spool) running_->spool->stop();
      checkpoints.swap(running_->ckpt_waiters);
      pauses.swap(running_->stop_waiters);
      job = to_proto(*running_);
    }
    cv_.notify_all();
  }
  for (auto& w : checkpoints)
    w(failed_precondition("the daemon is stopping: the job checkpoints as it stops, and goes on from there after the restart"), "", 0);
  for (auto& w : pauses) w(failed_precondition(kStoppingBeforePause), job);
}

std::string JobManager::settle(Job& job, const Result<JobResult>& res) {
  JobRecord& r = job.rec;
  if (!res.ok()) {
    r.state = r.cancel_requested ? v1::JOB_STATE_CANCELLED : v1::JOB_STATE_FAILED;
    r.reason = r.cancel_requested ? "cancelled while waiting for data" : res.status().to_string();
  } else {
    r.state = res->cancelled || r.cancel_requested ? v1::JOB_STATE_CANCELLED : v1::JOB_STATE_SUCCEEDED;
    r.reason = r.state == v1::JOB_STATE_CANCELLED ? "cancelled by request at step " + std::to_string(res->steps_done) : "";
    r.step = res->steps_done;
    if (res->steps_done) r.loss = res->final_loss;
    if (!res->checkpoint.empty()) r.last_checkpoint = res->checkpoint;
  }
  r.finished_ms = now_ms();
  if (job.spool) job.spool->stop();
  job.progress->waiting = false;
  return r.reason.empty() ? "finished" : r.reason;
}

Status JobManager::device_fault() const {
  std::lock_guard<std::mutex> lock(mu_);
  return device_fault_;
}

// The device is lost: nothing more can run in this process. The worker stops taking jobs
// (stopping_), the job keeps its state RUNNING (so it resumes from its last checkpoint when
// the restarted daemon loads it; the engine wrote no checkpoint from the failed step) and its
// reason names the first failing call until then. The daemon's main loop sees device_fault()
// and exits non-zero.
std::string JobManager::lose_device(Job& job, const Status& st) {
  JobRecord& r = job.rec;
  r.device_faults += 1;
  if (device_fault_.ok()) device_fault_ = st;
  stopping_ = true;
  cv_.notify_all();
  if (r.cancel_requested || r.device_faults >= kMaxDeviceFaults) {
    r.state = r.cancel_requested ? v1::JOB_STATE_CANCELLED : v1::JOB_STATE_FAILED;
    r.reason = r.cancel_requested ? "cancelled; its last run ended with the device lost: " + st.to_string()
                                  : "the device was lost in " + std::to_string(r.device_faults) +
                                        " runs of this job; the last: " + st.to_string();
    r.finished_ms = now_ms();
    if (job.spool) job.spool->stop();
    job.progress->waiting = false;
    spdlog::error("job {}: {}", r.id, r.reason);
    return r.reason;
  }
  r.reason = "device lost at step " + std::to_string(r.step) + " (run " + std::to_string(r.device_faults) + " of at most " +
             std::to_string(kMaxDeviceFaults) + "): " + st.to_string() +
             "; the daemon exits for a restart and the job resumes from " +
             (r.last_checkpoint.empty() ? std::string("its start") : r.last_checkpoint);
  spdlog::error("job {}: {}", r.id, r.reason);
  return r.reason;
}

Result<v1::SubmitJobResponse> JobManager::submit(const v1::JobSpec& proto) {
  auto job = std::make_shared<Job>();
  MT_ASSIGN_OR_RETURN(job->spec, spec_from_proto(proto, spec_roots(), opt_.nvme_paths));
  MT_RETURN_IF_ERROR(check_spec_inputs(job->spec));
  auto cfg = resolve_model(job->spec);
  if (!cfg.ok()) return invalid_argument("model: " + cfg.status().message());
  MT_RETURN_IF_ERROR(check_data_fits_model(job->spec, cfg->vocab_size));  // at submit, not when it starts
  auto plan = plan_job(job->spec, *cfg, opt_.budgets);
  if (!plan.ok()) return plan.status();
  if (!plan->fits) return resource_exhausted("the job does not fit this server: " + plan->reason);
  if (job->spec.offload == "nvme") MT_RETURN_IF_ERROR(check_nvme_space(*plan, job->spec.nvme));
  v1::SubmitJobResponse resp;
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return Status(StatusCode::kUnavailable, "the daemon is shutting down");
  job->rec.id = job_id(next_id_++);
  job->rec.name = job->spec.name;
  job->rec.spec = job_spec_to_json(job->spec);
  job->rec.total_steps = job->spec.steps;
  job->rec.created_ms = now_ms();
  job->priority = job->spec.priority;
  job->order = queue_.next_order();
  job->dir = opt_.state_dir + "/jobs/" + job->rec.id;
  // The new directory's entry durable before the job is acknowledged (a power loss, not a kill);
  // a submit answered with an error leaves no directory a restart would run.
  Status made = prepare(*job);
  if (made.ok()) made = fsync_dir(opt_.state_dir + "/jobs");
  if (made.ok()) made = save(*job);
  if (!made.ok()) {
    std::error_code ec;
    fs::remove_all(job->dir, ec);
    unsaved_.erase(job->rec.id);
    return made;
  }
  jobs_[job->rec.id] = job;
  enqueue(*job);
  if (job->spool) metrics_.set_data_queue(job->rec.id, 0);
  update_job_metrics();
  *resp.mutable_job() = to_proto(*job);
  plan_to_proto(job->plan, opt_.budgets, resp.mutable_plan());
  return resp;
}

Result<v1::PlanJobResponse> JobManager::plan(const v1::PlanJobRequest& req) {
  MT_ASSIGN_OR_RETURN(JobSpec spec, spec_from_proto(req.spec(), spec_roots(), opt_.nvme_paths));
  auto cfg = resolve_model(spec);
  if (!cfg.ok()) return invalid_argument("model: " + cfg.status().message());
  v1::PlanJobResponse out;
  if (req.max_seq_len()) {
    MT_ASSIGN_OR_RETURN(spec.train.seq_len, longest_seq_len(spec, *cfg, opt_.budgets.host, opt_.budgets.device));
    out.set_max_seq_len(spec.train.seq_len);
  }
  MT_ASSIGN_OR_RETURN(MemoryPlan p, plan_job(spec, *cfg, opt_.budgets));
  plan_to_proto(p, opt_.budgets, out.mutable_plan());
  out.set_seq_len(spec.train.seq_len);
  return out;
}

Result<std::shared_ptr<JobManager::Job>> JobManager::find(const std::string& id) {
  if (id.empty()) return invalid_argument("job_id is empty");
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return not_found("job_id = '" + id + "' names no job");
  return it->second;
}

Result<v1::Job> JobManager::get(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  MT_ASSIGN_OR_RETURN(auto job, find(id));
  return to_proto(*job);
}

Result<v1::Job> JobManager::cancel(const std::string& id) {
  v1::JobEvent ev;
  v1::Job out;
  std::unique_lock<std::mutex> ordered = order();
  {
    std::lock_guard<std::mutex> lock(mu_);
    MT_ASSIGN_OR_RETURN(auto job, find(id));
    if (job->rec.terminal())
      return failed_precondition("job " + id + " is already " + state_name(job->rec.state));
    job->rec.cancel_requested = true;
    if (running_ == job) {  // its runner may not exist yet: run_job cancels it once it does
      // Durable before it is acknowledged: a crash from here on ends the job CANCELLED.
      if (Status st = save(*job); !st.ok()) {
        job->rec.cancel_requested = false;
        return st;
      }
      if (job->runner) job->runner->request_cancel();
      if (job->spool) job->spool->stop();  // a job waiting for data stops waiting
      out = to_proto(*job);                // the state it ends in, at its next step boundary
      out.set_state(v1::JOB_STATE_CANCELLED);
      out.set_reason("cancel requested at step " + std::to_string(job->rec.step) +
                     "; the job stops at its next step boundary with a checkpoint");
      return out;
    }
    job->parked = false;
    job->progress->waiting = false;
    job->rec.state = v1::JOB_STATE_CANCELLED;
    job->rec.reason = "cancelled by request while queued";
    if (job->log) job->log->append("info", "job cancelled: " + job->rec.reason);
    job->rec.finished_ms = now_ms();
    queue_.erase(id);
    if (job->spool) job->spool->stop();
    if (Status st = save(*job); !st.ok()) return st;
    update_job_metrics();
    ev = event_of(*job);
    out = to_proto(*job);
  }
  deliver(ordered, id, ev);
  ordered.unlock();
  sweep_retention();
  return out;
}

Result<JobManager::PushAck> JobManager::push(const std::string& id, const uint32_t* tokens, size_t n,
                                             PushAt at) {
  std::shared_ptr<Job> job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    MT_ASSIGN_OR_RETURN(job, find(id));
    if (job->spec.data.source != "push")
      return failed_precondition("job " + id + " has data.source = '" + job->spec.data.source + "', not push");
    // A restarted daemon opens no spool for a push job that ended: say it ended
    if (job->rec.terminal() || !job->spool)
      return failed_precondition("job " + id + " is " + state_name(job->rec.state));
  }
  const int vocab = job->cfg.vocab_size;
  for (size_t i = 0; i < n; ++i)
    if (tokens[i] >= uint32_t(vocab))
      return invalid_argument("tokens[" + std::to_string(i) + "] = " + std::to_string(tokens[i]) +
                              " is out of vocabulary (vocab_size " + std::to_string(vocab) + ")");
  MT_ASSIGN_OR_RETURN(const uint64_t committed, job->spool->append(tokens, n, at));
  if (opt_.after_push_spooled) opt_.after_push_spooled(id);
  uint64_t total = 0;
  std::unique_lock<std::mutex> ordered = order();  // the job's rejoining the queue is a change
  v1::JobEvent ev;
  bool rejoined = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = jobs_.find(id);
    if (it == jobs_.end() || it->second != job)  // its spool's directory is being removed
      return failed_precondition("job " + id + " was deleted while this push was spooled; its tokens are not kept");
    rejoined = unpark_if_fed(*job);
    if (rejoined) ev = event_of(*job);
    total = job->spool->tokens();
    metrics_.set_data_queue(id, double(total - job->progress->consumed));  // not after a delete
  }
  if (rejoined) deliver(ordered, id, ev);
  return PushAck{total, committed};
}

Status JobManager::checkpoint(const std::string& id, CheckpointDone done) {
  std::unique_lock<std::mutex> lock(mu_);
  MT_ASSIGN_OR_RETURN(auto job, find(id));
  if (job->parked && !job->rec.last_checkpoint.empty()) {  // it checkpointed when it yielded
    const std::string dir = job->rec.last_checkpoint;
    const long step = job->rec.step;
    lock.unlock();
    done(Status::Ok(), dir, step);
    return Status::Ok();
  }
  if (running_ != job)
    return failed_precondition("job " + id + " is " + state_name(job->rec.state) + "; only a running job checkpoints");
  job->ckpt_waiters.push_back(std::move(done));
  if (job->runner) job->runner->request_checkpoint();  // else run_job asks once it has made the runner
  if (job->progress->waiting) job->progress->interrupt = true;  // checkpoints while it waits for data
  return Status::Ok();
}

Status JobManager::save(const Job& job) {
  JobRecord rec = job.rec;
  rec.last = job.last;
  rec.consumed_tokens = job.progress->consumed.load();
  rec.consumed_checksum = job.progress->checksum.load();
  if (job.spool) rec.spooled_tokens = job.spool->tokens();
  Status st = save_record(job.dir + "/job.json", rec);
  if (!st.ok()) {
    if (unsaved_.insert(job.rec.id).second) {
      spdlog::error("job {}: {}; tried again while idle and at checkpoints", job.rec.id, st.to_string());
      cv_.notify_all();  // an idle worker waits without a timeout until there is one to retry
    }
  } else if (unsaved_.erase(job.rec.id)) {
    spdlog::info("job {}: its record is saved again", job.rec.id);
  }
  if (job.rec.terminal() && job.log) job.log->close();
  return st;
}

void JobManager::resave_unsaved() {
  const std::set<std::string> ids = unsaved_;
  for (const std::string& id : ids) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) unsaved_.erase(id);  // deleted since
    else (void)save(*it->second);
  }
}

void JobManager::update_job_metrics() {
  std::map<std::string, int> counts;
  for (const auto& [id, job] : jobs_) counts[state_name(job->rec.state)]++;
  metrics_.set_jobs(counts);
}

}  // namespace mt::server

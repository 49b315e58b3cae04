// The job manager's scheduling: the priority queue's entries, preemption of the running job by
// a higher-priority one, a push job that yields for want of data (parked) and rejoins when fed,
// and PauseJob/ResumeJob. A preempted or paused run stops at a step boundary through the engine's
// cancel path, which writes a checkpoint; the next run resumes from it bit for bit (JobRunner
// resumes from the job directory's latest checkpoint).
#include "server/job_manager.h"
#include "server/managed_job.h"

namespace mt::server {

void JobManager::enqueue(Job& job) {
  queue_.push(job.rec.id, job.priority, job.order);
  preempt_if_outranked();
  cv_.notify_all();
}

void JobManager::preempt_if_outranked() {
  if (!running_ || !running_->preempted_by.empty() || !queue_.outranks(running_->priority)) return;
  Job& job = *running_;
  const std::string& by = queue_.front();
  const auto it = jobs_.find(by);
  if (it == jobs_.end()) return;  // never: the queue holds registered jobs only
  job.preempted_by = by + " (priority " + std::to_string(it->second->priority) + " > " +
                     std::to_string(job.priority) + ")";
  spdlog::info("job {}: preempted by {}; it checkpoints at its next step boundary", job.rec.id, job.preempted_by);
  if (job.runner) job.runner->request_cancel();  // else run_job sees preempted_by when it starts the runner
  if (job.progress->waiting) job.progress->interrupt = true;  // a push job waiting for data stops waiting
}

std::string JobManager::requeue(Job& job, const JobResult& res) {
  JobRecord& r = job.rec;
  r.step = res.steps_done;
  if (res.steps_done) r.loss = res.final_loss;
  if (!res.checkpoint.empty()) r.last_checkpoint = res.checkpoint;
  const std::string at = "at step " + std::to_string(r.step) + " with checkpoint " +
                         (r.last_checkpoint.empty() ? std::string("(none: no step yet)") : r.last_checkpoint);
  if (r.pause_requested) {
    r.state = v1::JOB_STATE_PAUSED;
    r.pause_requested = false;
    r.reason = "paused by request " + at;
    job.preempted_by.clear();
    job.resumed_while_pausing = false;
    return r.reason + "; ResumeJob queues it again";
  }
  const std::string by = job.preempted_by;
  job.preempted_by.clear();
  job.resumed_while_pausing = false;
  r.state = v1::JOB_STATE_QUEUED;
  r.reason.clear();
  if (!by.empty()) r.preemptions += 1;
  enqueue(job);  // in its place: it runs again once nothing of higher priority waits
  return (by.empty() ? std::string("resumed while it was pausing, stopped ") : "preempted by " + by + " ") + at +
         "; queued again, it resumes from that checkpoint";
}

std::string JobManager::park(Job& job, const JobResult& res) {
  JobRecord& r = job.rec;
  r.state = v1::JOB_STATE_QUEUED;
  r.step = res.steps_done;
  if (res.steps_done) r.loss = res.final_loss;
  if (!res.checkpoint.empty()) r.last_checkpoint = res.checkpoint;
  job.parked = true;
  unpark_if_fed(job);  // a push may have arrived while it checkpointed
  return "waiting for data at step " + std::to_string(r.step) +
         ": yielded the device to the next queued job; rejoins the queue when a push brings a full batch";
}

bool JobManager::unpark_if_fed(Job& job) {
  const uint64_t batch = uint64_t(job.spec.train.global_batch) * uint64_t(job.spec.train.seq_len + 1);
  if (!job.parked || job.rec.terminal() || !job.spool || job.spool->tokens() < job.progress->consumed.load() + batch)
    return false;
  job.parked = false;
  job.progress->waiting = false;  // fed: QUEUED in its place, no longer waiting for data
  job.order = queue_.next_order();  // last of its priority, as a fresh submission
  enqueue(job);
  return true;
}

int JobManager::queue_position(const Job& job) const {
  if (running_.get() == &job) return 0;
  const int pos = queue_.position(job.rec.id);
  return pos > 0 ? pos : -1;
}

// What a pause is told when the job's run has ended: the job, PAUSED at its checkpoint (or QUEUED
// after a resume while pausing); FAILED_PRECONDITION when it ended otherwise, saying how.
Status JobManager::pause_outcome(const v1::Job& ended) {
  switch (ended.state()) {
    case v1::JOB_STATE_PAUSED:
    case v1::JOB_STATE_QUEUED: return Status::Ok();
    case v1::JOB_STATE_RUNNING: return failed_precondition(kStoppingBeforePause);  // the device lost, the daemon exits
    default:
      return failed_precondition(std::string("the job ended ") + state_name(ended.state()) +
                                 " before it paused: " + ended.reason());
  }
}

Status JobManager::pause(const std::string& id, JobDone done) {
  v1::JobEvent ev;
  v1::Job out;
  std::unique_lock<std::mutex> ordered = order();
  {
    std::lock_guard<std::mutex> lock(mu_);
    MT_ASSIGN_OR_RETURN(auto job, find(id));
    JobRecord& r = job->rec;
    if (r.cancel_requested && !r.terminal())
      return failed_precondition("job " + id + " is being cancelled: it ends CANCELLED at its next step boundary");
    if (r.terminal() || r.state == v1::JOB_STATE_PAUSED || r.pause_requested)
      return failed_precondition("job " + id + " is already " + (r.pause_requested ? "pausing" : state_name(r.state)));
    if (running_ == job) {
      r.pause_requested = true;  // durable before it is acknowledged: a restart finds it PAUSED
      if (Status st = save(*job); !st.ok()) {
        r.pause_requested = false;
        return st;
      }
      job->stop_waiters.push_back(std::move(done));  // told by finish_job
      if (job->runner) job->runner->request_cancel();
      if (job->progress->waiting) job->progress->interrupt = true;
      return Status::Ok();
    }
    queue_.erase(id);
    job->parked = false;
    job->progress->waiting = false;
    r.state = v1::JOB_STATE_PAUSED;
    r.reason = "paused by request while queued at step " + std::to_string(r.step);
    if (Status st = save(*job); !st.ok()) return st;
    update_job_metrics();
    ev = event_of(*job);
    out = to_proto(*job);
  }
  deliver(ordered, id, ev);
  ordered.unlock();
  done(Status::Ok(), out);
  return Status::Ok();
}

Result<v1::Job> JobManager::resume(const std::string& id) {
  v1::JobEvent ev;
  v1::Job out;
  std::unique_lock<std::mutex> ordered = order();
  {
    std::lock_guard<std::mutex> lock(mu_);
    MT_ASSIGN_OR_RETURN(auto job, find(id));
    JobRecord& r = job->rec;
    if (r.cancel_requested && !r.terminal())
      return failed_precondition("job " + id + " is being cancelled: it ends CANCELLED at its next step boundary");
    if (running_ == job && r.pause_requested) {
      // Still stopping: it goes back to the queue instead of pausing (as a preempted job does,
      // though it is no preemption).
      r.pause_requested = false;
      if (Status st = save(*job); !st.ok()) {
        r.pause_requested = true;
        return st;
      }
      job->resumed_while_pausing = true;
      out = to_proto(*job);
      out.set_state(v1::JOB_STATE_QUEUED);
      return out;
    }
    if (r.state != v1::JOB_STATE_PAUSED) return failed_precondition("job " + id + " is " + state_name(r.state) + ", not paused");
    r.state = v1::JOB_STATE_QUEUED;
    r.reason.clear();
    if (Status st = save(*job); !st.ok()) {
      r.state = v1::JOB_STATE_PAUSED;
      return st;
    }
    enqueue(*job);
    update_job_metrics();
    ev = event_of(*job);
    out = to_proto(*job);
  }
  deliver(ordered, id, ev);
  return out;
}

}  // namespace mt::server

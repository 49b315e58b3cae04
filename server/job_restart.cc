// What a daemon restart finds: each job's record loaded, a run the restart cut short rewound to
// its last checkpoint, and a pause or cancel acknowledged before the restart carried out.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

#include "engine/io/checkpoint.h"
#include "server/job_manager.h"
#include "server/managed_job.h"

namespace mt::server {

namespace fs = std::filesystem;

Result<std::shared_ptr<JobManager::Job>> JobManager::load_job(const std::string& dir) {
  MT_ASSIGN_OR_RETURN(JobRecord rec, load_record(dir + "/job.json"));
  auto job = std::make_shared<Job>();
  job->rec = rec;
  job->dir = dir;
  if (auto log = LogFile::open(dir + "/log.txt", opt_.log_file_bytes, rec.terminal()); log.ok()) job->log = *log;
  job->last = rec.last;  // what its views showed of its last step
  job->progress->consumed = rec.consumed_tokens;  // a push job's spool restores these when it resumes
  job->progress->checksum = rec.consumed_checksum;
  if (const Json* p = rec.spec.find("priority"); p && p->is_number()) job->priority = int(p->as_int());
  job->order = job_number(rec.id);
  // Its spec says what views show of every job (its TensorBoard directory, its data source);
  // only a job that goes on is prepared from it.
  auto spec = job_spec_from_json(rec.spec);
  if (spec.ok()) job->spec = *spec;
  if (rec.terminal()) return job;
  if (rec.state == v1::JOB_STATE_RUNNING) rewind_to_checkpoint(*job);
  if (rec.cancel_requested) {
    cancel_on_restart(*job);
    return job;
  }
  if (rec.pause_requested && rec.state == v1::JOB_STATE_RUNNING) pause_on_restart(*job);
  if (Status st = spec.ok() ? prepare(*job) : spec.status(); !st.ok()) {
    job->rec.state = v1::JOB_STATE_FAILED;
    job->rec.reason = "cannot resume after restart: " + st.to_string();
    job->rec.finished_ms = now_ms();
    log_restart_change(*job);
    (void)save(*job);
  }
  return job;
}

// The gauges a scrape shows of where a job stands, from its record: before, a restarted daemon
// showed no held-out loss or checkpoint step until the job's next evaluation or checkpoint.
void JobManager::restore_metrics(const Job& job) {
  const JobRecord& r = job.rec;
  const long step = r.last_checkpoint.empty() ? 0 : parse_step_dir(fs::path(r.last_checkpoint).filename().string());
  metrics_.restore_job(r.id, r.eval, std::max(step, 0L));
}

// The record of a job that was running when the daemon died says the step of its last step
// event; what it goes on from is its last checkpoint. The record says that, so a paused or
// cancelled job does not show steps it lost. Left as it is: a checkpoint that cannot be read (the
// job's start says why), and a job with none that continues another run (init.from; its step).
void JobManager::rewind_to_checkpoint(Job& job) {
  JobRecord& r = job.rec;
  const auto dir = resolve_checkpoint(job.dir + "/checkpoints");
  const auto saved = dir.ok() ? read_trainer_state(*dir) : Result<TrainerState>(dir.status());
  const Json* init = r.spec.find("init");
  const bool continues = init && init->find("from") && init->find("from")->is_string();
  if (!saved.ok() && (dir.status().code() != StatusCode::kNotFound || continues)) return;
  const long step = saved.ok() ? saved->step : 0;
  const std::string last = saved.ok() ? *dir : "";
  if (step == r.step && last == r.last_checkpoint) return;
  spdlog::info("job {}: its record said step {} when the daemon ended; its last checkpoint is at step {}", r.id, r.step,
               step);
  r.step = step;
  r.loss = saved.ok() ? saved->last_loss : 0;
  r.last_checkpoint = last;  // one published after the record was last saved, too
  (void)save(job);
}

void JobManager::pause_on_restart(Job& job) {
  JobRecord& r = job.rec;
  r.state = v1::JOB_STATE_PAUSED;
  r.pause_requested = false;  // carried out: a later resume must not pause it again
  r.reason = "paused by request at step " + std::to_string(r.step) + " (acknowledged before a daemon restart)";
  log_restart_change(job);
  (void)save(job);
}

void JobManager::cancel_on_restart(Job& job) {
  JobRecord& r = job.rec;
  r.state = v1::JOB_STATE_CANCELLED;
  r.reason = "cancelled by request at step " + std::to_string(r.step) +
             " (acknowledged before a daemon restart; not resumed)";
  r.finished_ms = now_ms();
  log_restart_change(job);
  (void)save(job);
}

// A state a restart gives a job, in its own log as a run's changes are (line 'job failed: ...'),
// before save() closes a finished job's log, and in the daemon's: its log had ended with
// "interrupted by a daemon shutdown ...; resumes on restart" when the restart failed it.
void JobManager::log_restart_change(Job& job) {
  const JobRecord& r = job.rec;
  const bool failed = r.state == v1::JOB_STATE_FAILED;
  if (job.log) job.log->append(failed ? "error" : "info", std::string("job ") + state_name(r.state) + ": " + r.reason);
  if (failed) spdlog::error("job {}: {}", r.id, r.reason);
  else spdlog::info("job {}: {}", r.id, r.reason);
}

}  // namespace mt::server

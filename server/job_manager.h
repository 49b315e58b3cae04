// The job manager: a priority queue (server/job_queue.h) in front of one worker thread (one
// running job per device), admission by the memory plan against the daemon's budgets, cancel,
// pause/resume, preemption, checkpoint-now, push-data spools, progress events for watchers, and
// job records under STATE_DIR/jobs/ID/ that survive a restart (an interrupted job is queued
// again in its place and resumes from its last checkpoint). What a client is told is saved
// before it is told (a submitted job, an acknowledged cancel or pause). A push job starved of
// data while others are queued yields the worker: it checkpoints, goes back to QUEUED
// (waiting_for_data) outside the queue, and rejoins the queue (last of its priority) once a
// push brings a full batch.
//
// Preemption: when a queued job's priority is higher than the running job's, the running job
// stops at its next step boundary with a checkpoint (the engine's cancel path), goes back to
// QUEUED in its place (priority, then submission order) with Job.preemptions counted, and later
// resumes from that checkpoint bit for bit. Nothing about it needs saving first: a crash before
// the requeue leaves the job RUNNING in its record, which a restart queues again all the same.
//
// Housekeeping (job_housekeeping.cc): DeleteJob, retention (Options::retain_*), ListJobs
// paging, and the state directory's size for megatrain_state_dir_bytes.
#pragma once
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/job/job.h"
#include "megatrain/v1/trainer.pb.h"
#include "server/event_history.h"
#include "server/job_queue.h"
#include "server/job_record.h"
#include "server/log_file.h"
#include "server/metrics.h"
#include "server/push_spool.h"
#include "server/spec_convert.h"

namespace mt::server {

namespace v1 = megatrain::v1;

class JobManager {
 public:
  struct Options {
    std::string state_dir, data_root;
    std::vector<std::string> nvme_paths;  // megatraind --nvme_paths: where jobs' NVMe tiers may go
    Budgets budgets;
    double peak_flops = 0;  // 0: estimated
    // Runs a job instead of runner.run() (tests inject faults with it); unset: runner.run().
    std::function<Result<JobResult>(JobRunner&)> run_job;
    // Called by a push between spooling its tokens and queueing the job they feed (tests delete
    // the job there); unset: nothing.
    std::function<void(const std::string& job_id)> after_push_spooled;
    // Retention of finished jobs (deleted with their files at startup and whenever a job
    // finishes): keep the newest `retain_jobs` (0: all) and none older than `retain_days` (0: any age).
    int retain_jobs = 0;
    double retain_days = 0;
    std::shared_ptr<LogFile> daemon_log;  // StreamLogs' "daemon"; null: none
    uint64_t log_file_bytes = 0;         // each job log's rotation size; 0: LogFile's default
    double shutdown_timeout_s = 0;       // how long a stop waits for a job's checkpoint; 0: unbounded
    size_t max_reply_bytes = 4 << 20;    // a ListJobs page ends before its reply would outgrow this
  };
  // A job whose run ends with the device lost (StatusCode::kDeviceLost: a sticky CUDA error,
  // the process's context unusable) stays RUNNING with the failure as its reason, the worker
  // takes no further job, and device_fault() says so: the daemon then exits non-zero, systemd
  // restarts it and the job resumes from its last checkpoint. After this many such runs of one
  // job it FAILS instead (a device that faults every time must not restart forever).
  static constexpr int kMaxDeviceFaults = 3;
  using CheckpointDone = std::function<void(const Status&, const std::string& dir, long step)>;
  using JobDone = std::function<void(const Status&, const v1::Job&)>;
  using Listener = std::function<void(const v1::JobEvent&)>;

  JobManager(Options opt, Metrics& metrics);
  ~JobManager();

  Status start();  // loads the records, re-queues unfinished jobs, starts the worker
  // The daemon's stop, before its server's: the running job is asked to stop, and the calls that
  // wait on it (Checkpoint, PauseJob) are answered at once, so the server's shutdown never waits
  // for a step or a checkpoint. shutdown() then waits for the worker.
  void begin_stop();
  // Stops the worker: the running job checkpoints at its next step boundary and stays RUNNING in
  // its record. False when it did not stop within `timeout` (the caller then exits anyway).
  bool shutdown(std::chrono::milliseconds timeout);
  // The first run that ended with the device lost (see kMaxDeviceFaults); Ok while none has.
  Status device_fault() const;

  Result<v1::SubmitJobResponse> submit(const v1::JobSpec& spec);
  Result<v1::PlanJobResponse> plan(const v1::PlanJobRequest& req);  // with max_seq_len: the longest that fits
  Result<v1::Job> get(const std::string& id);
  // A page of jobs in submission order (see ListJobsRequest); INVALID_ARGUMENT for a negative
  // page_size or a page_token this daemon did not write.
  Result<v1::ListJobsResponse> list(const v1::ListJobsRequest& req);
  // A running job's cancel is saved in its record before the reply, which shows the state the
  // job ends in (CANCELLED); it stops at its next step boundary (at once while waiting for data).
  Result<v1::Job> cancel(const std::string& id);
  // Pause: a running job's pause is saved in its record at once, and `done` hears of it when the
  // job has stopped at its next step boundary, checkpointed, and its record says PAUSED there
  // (the reply's step and last_checkpoint are what a resume starts from). A queued job leaves the
  // queue at once. `done` is not called when this returns an error.
  Status pause(const std::string& id, JobDone done);
  Result<v1::Job> resume(const std::string& id);  // a paused job back to the queue
  // DeleteJob: refused while the job runs; a queued or paused job is cancelled first.
  Result<v1::DeleteJobResponse> remove(const std::string& id, bool keep_checkpoints);
  // Validates (every token < vocab; errors name the index) and spools durably what the push does
  // not hold yet (see PushSpool::append).
  struct PushAck {
    uint64_t spooled = 0;    // the job's total spooled tokens
    uint64_t committed = 0;  // the push's tokens spooled, this try and earlier ones
  };
  Result<PushAck> push(const std::string& id, const uint32_t* tokens, size_t n, PushAt at = {});
  // A running job checkpoints at its next step boundary, or at once while it waits for data; a
  // job that yielded for want of data answers with the checkpoint it wrote when it yielded.
  Status checkpoint(const std::string& id, CheckpointDone done);
  // Calls `l` with the job's current state at once, then with every event until unwatch; with
  // `from_start`, first with the job's step and evaluation events this daemon still holds
  // (EventHistory). No event falls between the state and the first live event, and none repeats
  // a change the state already shows (see order()).
  Result<uint64_t> watch(const std::string& id, Listener l, bool from_start = false);
  void unwatch(uint64_t token);

  // Logs and artifacts (issue 17). A job's log (STATE_DIR/jobs/ID/log.txt), or the daemon's own
  // for an empty id or "daemon". NOT_FOUND for an unknown job.
  Result<std::shared_ptr<LogFile>> log(const std::string& id);
  struct JobFiles {
    std::string dir;  // STATE_DIR/jobs/ID; its checkpoints are under dir/checkpoints
    v1::JobState state;
    uint64_t running_host_bytes = 0;  // the host memory the running job (any) was admitted with
    std::string data_root;            // where exports go
    uint64_t host_budget = 0;         // 0: unlimited
  };
  Result<JobFiles> files(const std::string& id);

 private:
  struct Job;
  Result<std::shared_ptr<Job>> find(const std::string& id);
  Result<std::shared_ptr<Job>> load_job(const std::string& dir);
  Status prepare(Job& job);  // spec, model, plan, spool
  void worker();
  void run_job(const std::shared_ptr<Job>& job);
  JobHooks hooks_for(const std::shared_ptr<Job>& job);  // job_hooks.cc: the run's events to the record and watchers
  void finish_job(const std::shared_ptr<Job>& job, const Result<JobResult>& res);
  std::string settle(Job& job, const Result<JobResult>& res);  // mu_ held; terminal state
  std::string park(Job& job, const JobResult& res);            // mu_ held; starved: off the queue
  std::string lose_device(Job& job, const Status& st);         // mu_ held; see kMaxDeviceFaults
  bool unpark_if_fed(Job& job);                                 // mu_ held; back in the queue: true
  void cancel_on_restart(Job& job);  // a cancel acknowledged before the restart
  void pause_on_restart(Job& job);   // a pause acknowledged before the restart
  void log_restart_change(Job& job);  // the state a restart gives a job, in its log and the daemon's
  void restore_metrics(const Job& job);  // its eval and checkpoint gauges from its record
  void rewind_to_checkpoint(Job& job);  // a run the restart cut short: its record at its checkpoint
  // Scheduling (job_scheduling.cc), mu_ held.
  void enqueue(Job& job);              // into the queue in its place; preempts a lower running job
  void preempt_if_outranked();         // the running job yields to a higher queued one
  std::string requeue(Job& job, const JobResult& res);  // a preempted or paused run's end
  static Status pause_outcome(const v1::Job& ended);
  static constexpr const char* kStoppingBeforePause =
      "the daemon is stopping before the job paused; the pause holds: the job is PAUSED at its last checkpoint "
      "when the daemon restarts";
  int queue_position(const Job& job) const;
  // Housekeeping (job_housekeeping.cc), mu_ held. detach: the job's directory renamed out of the
  // way (removed after the lock is released), the last id ever issued saved first.
  Result<std::string> detach(const Job& job);
  void forget(const std::string& id);  // out of jobs_
  void sweep_retention();              // mu_ not held
  void refresh_disk_usage();           // mu_ not held
  v1::Job to_proto(const Job& job) const;  // mu_ held
  v1::JobEvent event_of(const Job& job) const;  // mu_ held
  // Events in the order of the changes they tell (job_views.cc). Every change a watcher hears of
  // is made under order() — taken before mu_ — and delivered before order() is released; a watch
  // registers under it too. So no two changes' events cross, and a watch's first event (the
  // state) is never followed by the event of a change it already shows. Answers to the calls that
  // waited on a change (PauseJob, Checkpoint) go out after its event, with order() released.
  std::unique_lock<std::mutex> order() { return std::unique_lock<std::mutex>(listeners_mu_); }
  // To the job's watchers; a step or evaluation event (`progress`) is kept for later ones too.
  void deliver(const std::unique_lock<std::mutex>& order, const std::string& id, const v1::JobEvent& ev,
               bool progress = false);
  // mu_ held; a failure is logged, and the record tried again (resave_unsaved) until it is saved:
  // a job a client was told ended must not run again after a restart because its record was not
  // written (its disk full, the daemon out of descriptors).
  Status save(const Job& job);
  void resave_unsaved();  // mu_ held
  std::vector<std::string> spec_roots() const;
  void update_job_metrics();  // mu_ held

  Options opt_;
  Metrics& metrics_;
  mutable std::mutex mu_;
  std::condition_variable cv_, worker_done_cv_;
  std::map<std::string, std::shared_ptr<Job>, IdOrder> jobs_;
  JobQueue queue_;
  std::shared_ptr<Job> running_;
  long next_id_ = 1;
  bool stopping_ = false, worker_done_ = false, started_ = false;
  Status device_fault_;
  std::set<std::string> unsaved_;  // jobs whose last save failed
  std::thread worker_;

  std::mutex listeners_mu_;  // order(): taken before mu_ when both are held
  std::map<uint64_t, std::pair<std::string, Listener>> listeners_;
  uint64_t next_listener_ = 1;
  EventHistory history_;  // listeners_mu_
};

}  // namespace mt::server

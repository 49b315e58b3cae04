// The job manager's view of one job (its record, prepared spec and model, spool, the running
// run's handle). Private to the job manager's files: job_manager.cc, job_scheduling.cc and
// job_housekeeping.cc.
#pragma once
#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <vector>

#include "server/job_manager.h"
#include "server/log_file.h"

namespace mt::server {

struct JobManager::Job {
  JobRecord rec;
  JobSpec spec;
  ModelConfig cfg;
  MemoryPlan plan;
  double flops_per_token = 0;
  std::string dir;
  std::shared_ptr<PushSpool> spool;
  std::shared_ptr<PushProgress> progress = std::make_shared<PushProgress>();
  JobRunner* runner = nullptr;
  bool parked = false;  // yielded the worker for want of data; rejoins the queue when fed
  int priority = 0;     // the spec's
  long order = 0;       // its place among jobs of its priority (JobQueue::push)
  std::string preempted_by;  // set while this run yields to a higher-priority job
  bool resumed_while_pausing = false;  // a ResumeJob came while it paused: back to the queue, no preemption
  // Its run is asked to stop and wait (PAUSED, or QUEUED again) rather than end.
  bool stopping_to_wait() const { return rec.pause_requested || !preempted_by.empty() || resumed_while_pausing; }
  double run_seconds = 0, run_tokens = 0;  // over the steps this daemon ran
  long run_steps = 0;
  StepStats last;
  std::vector<CheckpointDone> ckpt_waiters;
  std::vector<JobDone> stop_waiters;  // pauses waiting for the run to stop
  std::shared_ptr<LogFile> log;  // STATE_DIR/jobs/ID/log.txt, closed once the job has ended
  mutable std::shared_ptr<const v1::JobSpec> spec_proto;  // rec.spec as the proto, made once (to_proto)
};

}  // namespace mt::server

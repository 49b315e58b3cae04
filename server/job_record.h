// A job's durable record (STATE_DIR/jobs/ID/job.json): written atomically on every state
// change, read back at startup so jobs survive a daemon restart.
#pragma once
#include <cstdint>
#include <string>

#include "engine/base/json.h"
#include "engine/exec/engine_stats.h"
#include "engine/io/checkpoint.h"
#include "megatrain/v1/trainer.pb.h"

namespace mt::server {

struct JobRecord {
  std::string id, name;
  megatrain::v1::JobState state = megatrain::v1::JOB_STATE_QUEUED;
  std::string reason;
  Json spec;  // engine JSON (job_spec_to_json), paths resolved
  long step = 0, total_steps = 0;
  double loss = 0, first_loss = 0, tokens_per_second = 0;
  std::string last_checkpoint;
  int64_t created_ms = 0, started_ms = 0, finished_ms = 0;
  // Push jobs: tokens consumed and their checksum, so status still shows them after a restart.
  uint64_t consumed_tokens = 0, consumed_checksum = 0;
  // Push jobs: tokens spooled, so a finished job (whose spool is not reopened) still reports them.
  uint64_t spooled_tokens = 0;
  // An acknowledged CancelJob of a running job, saved before the reply: a job whose record says
  // so ends CANCELLED after a restart instead of training on.
  bool cancel_requested = false;
  // Runs of this job that ended with the device lost (a sticky CUDA error). The job stays
  // RUNNING and resumes after the daemon's restart; at JobManager::kMaxDeviceFaults it fails.
  int device_faults = 0;
  // An acknowledged PauseJob of a running job, saved before the reply: a job whose record says
  // so is PAUSED after a restart instead of queued.
  bool pause_requested = false;
  int preemptions = 0;  // runs stopped for a higher-priority job
  EvalProgress eval;  // spec.eval: the latest held-out evaluation and the lowest so far
  // The last step's update as the job's views show it (grad norm, learning rate, packing,
  // routing): the record keeps those fields (last_update), so a restarted daemon shows them too.
  StepStats last;
  bool terminal() const;
};

// SUCCEEDED, FAILED or CANCELLED: a job in it never runs again.
bool terminal(megatrain::v1::JobState s);

int64_t now_ms();
Json record_to_json(const JobRecord& r);
Result<JobRecord> record_from_json(const Json& j);
Status save_record(const std::string& path, const JobRecord& r);  // temp + fsync + rename
Result<JobRecord> load_record(const std::string& path);
const char* state_name(megatrain::v1::JobState s);  // "queued", "running", ..., "paused"

}  // namespace mt::server

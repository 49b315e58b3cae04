// JobRunner: runs one training job end to end — model, initial weights (seed, HF model or
// checkpoint), data source, executor, the step loop, checkpoints, cancel — and reports each
// step through hooks. The CLI's `train` and the daemon's job manager both drive this.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "engine/backend/backend.h"
#include "engine/io/checkpoint.h"
#include "engine/data/data_source.h"
#include "engine/exec/engine_stats.h"
#include "engine/exec/planner.h"
#include "engine/job/held_out.h"
#include "engine/job/job_spec.h"

namespace mt {

enum class LogLevel { kDebug, kInfo, kWarning, kError };

// What a checkpoint cost (the job's log line, for metrics): its size, the seconds from its
// start to its publish, and how long the training paused for it (written between steps: the
// step's updates and the write; beside training: the step's updates and the updates that
// waited for the writer).
struct CheckpointReport {
  long step = 0;
  uint64_t bytes = 0;
  double write_seconds = 0;
  double pause_seconds = 0;
  bool beside_training = false;
};

struct JobHooks {
  std::function<void(const StepStats&)> on_step;
  std::function<void(const EvalReport&)> on_eval;  // spec.eval: each held-out evaluation
  std::function<void(LogLevel, const std::string&)> on_log;
  std::function<void(const std::string& checkpoint_dir, long step)> on_checkpoint;
  std::function<void(const CheckpointReport&)> on_checkpoint_cost;  // before its on_checkpoint
  // Supplies the data source for `data.source: push` (the daemon's spool); other sources are
  // built by the engine itself.
  std::function<Result<std::unique_ptr<DataSource>>(const JobSpec&, int vocab)> make_push_source;
  // Asked when the data source has no data now (UNAVAILABLE): true stops the run, checkpointed,
  // with result.starved (the daemon yields the device to the next queued job); false or unset
  // waits on.
  std::function<bool()> yield_when_starved;
  // Supplies the streaming executor's device (tests: a CPU backend with an injected fault);
  // unset: the backend spec.backend names.
  std::function<Result<std::unique_ptr<Backend>>(const JobSpec&)> make_backend;
  // How long a stop waits for the checkpoint it asks for (the daemon's --shutdown_timeout); 0:
  // unbounded. A checkpoint expected to take longer (this job's checkpoint bytes at the bandwidth
  // its last checkpoint reached) is warned about before it starts: a stop then would lose it.
  double checkpoint_bound_s = 0;
};

struct JobResult {
  long steps_done = 0;
  long steps_run = 0;            // trained by this run (0: the job had already finished, or was starved)
  double final_loss = 0;         // of the last step; restored from the checkpoint when this run trained none
  double tokens_per_second = 0;  // over the steps this run trained; 0 when it trained none
  std::string checkpoint;        // last checkpoint ("" if none)
  bool cancelled = false;
  bool starved = false;          // stopped for want of data (hooks.yield_when_starved)
  bool data_exhausted = false;   // stopped at the end of data.epochs, before `steps`
  double packing_efficiency = -1;  // real tokens / slots this run trained on (< 0: not a packing source)
  EvalProgress eval;  // spec.eval: the latest held-out evaluation and the best, as the checkpoint has them
};

// Resolves the spec's model to a config (preset, config.json or HF model dir).
Result<ModelConfig> resolve_model(const JobSpec& spec);

// The one memory plan of a job, answering what its executor will allocate: the CLI's `plan`,
// the daemon's PlanJob and admission, and the streaming executor the job builds all use these
// options. Budgets of 0 are unlimited.
// The device memory a job may use when nothing says otherwise: on a CUDA machine the GPU's free
// memory (after this process's CUDA context), else 0 (unlimited). What the backend allocates
// outside the executor's arena is counted by the plan (its `backend` entry), not guessed. The
// executor of a CUDA job places layer inputs by this budget, and it is megatraind's
// --device_memory default, so admission and the executor agree.
uint64_t default_device_budget();
// backend: cpu, cuda, or auto (CUDA when a device is usable here, else the CPU).
bool uses_cuda(const JobSpec& spec);
// precision: fp32, bf16, or auto (bf16 on CUDA, fp32 on the CPU, where bf16 is emulated).
Precision job_precision(const JobSpec& spec);
// spec.train with the resolved precision: what the executors and the planner are given.
TrainOptions job_train_options(const JobSpec& spec);
// `processes`: how many the job runs as (mpirun -np); host bytes are then per process.
PlanOptions job_plan_options(const JobSpec& spec, const ModelConfig& cfg, uint64_t host_budget = 0,
                             uint64_t device_budget = 0, int processes = 1);
// The NVMe tier's paths: directories, each filesystem with room for its share of the plan's
// drive bytes (resource_exhausted naming the path, else).
Status check_nvme_space(const MemoryPlan& plan, const NvmeTierOptions& nvme);
// device_tflops: what the NVMe tier's verdict assumes of the step (PlanOptions; 0: the default).
Result<MemoryPlan> plan_for_job(const JobSpec& spec, const ModelConfig& cfg, uint64_t host_budget,
                                uint64_t device_budget, int processes = 1, double device_tflops = 0);
// The longest seq_len (other fields as in `spec`) whose plan fits the budgets: a binary search
// over plan_for_job, nothing allocated. FailedPrecondition when not even seq_len 1 fits.
Result<int> longest_seq_len(const JobSpec& spec, const ModelConfig& cfg, uint64_t host_budget, uint64_t device_budget);

class JobRunner {
 public:
  // job_dir holds checkpoints/ (created if needed). A run resumes from job_dir's latest
  // checkpoint when one exists (same spec hash, and the same `steps` unless the LR schedule is
  // constant: a different span would silently change the schedule), else initialises from
  // spec.init. A checkpoint is written only when there is a step not yet saved; a request when
  // there is none reports the existing one. `device_budget` is what the job was admitted under
  // (megatraind's --device_memory); its executor places layer inputs by it. 0: the default
  // (default_device_budget() on CUDA, unlimited on the CPU).
  // `host_budget` likewise (megatraind's --host_memory): restore copies of speculative updates
  // are planned within it (0: unlimited).
  JobRunner(JobSpec spec, std::string job_dir, JobHooks hooks, uint64_t device_budget = 0, uint64_t host_budget = 0);

  Result<JobResult> run();       // blocking
  void request_cancel() { cancel_ = true; }        // stops at the next step boundary, checkpoints
  // Before run(): the daemon's run hook (tests) may replace a hook, e.g. make_backend with a
  // faulty device.
  JobHooks& hooks() { return hooks_; }
  // Writes one at the next step boundary, or while the data source reports it has no data.
  void request_checkpoint() { checkpoint_now_ = true; }

 private:
  JobSpec spec_;
  std::string job_dir_;
  JobHooks hooks_;
  uint64_t device_budget_, host_budget_;
  std::atomic<bool> cancel_{false}, checkpoint_now_{false};
};

// Builds the data source a spec names (not push): spec.data, or any other data spec (eval.data).
Result<std::unique_ptr<DataSource>> make_data_source(const JobSpec& spec, int vocab);
Result<std::unique_ptr<DataSource>> make_data_source(const DataSpec& data, int vocab);

}  // namespace mt

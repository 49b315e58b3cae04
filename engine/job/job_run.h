// One run of a job (JobRunner::run), in its phases: opened — the run's directory held, its
// executor, data and held-out set built, its first state (fresh, from spec.init, or resumed) and
// its place in the data — then trained step by step (evaluations and checkpoints between steps),
// and finished by the last evaluation and checkpoint.
#pragma once
#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "engine/base/file_lock.h"
#include "engine/io/tensorboard.h"
#include "engine/job/held_out.h"
#include "engine/job/job.h"
#include "engine/job/job_checkpoints.h"
#include "engine/job/job_executor.h"

namespace mt {

class JobRun {
 public:
  // What another thread asks of a run in progress (JobRunner's request_cancel, request_checkpoint).
  struct Requests {
    std::atomic<bool>& cancel;
    std::atomic<bool>& checkpoint_now;
  };
  JobRun(const JobSpec& spec, const std::string& job_dir, const JobHooks& hooks, Requests requests);
  JobRun(const JobRun&) = delete;
  JobRun& operator=(const JobRun&) = delete;

  // Everything before the first step, refused before any memory is taken where it can be.
  Status open(uint64_t device_budget, uint64_t host_budget);
  // Trains to spec.steps, or until a cancel, the end of data.epochs, or no data (starved).
  Result<JobResult> train();

 private:
  enum class Next { kStep, kWait, kEnd };  // what the data gives: a batch, nothing yet, or the end

  bool lead() const { return nodes_.comms().rank() == 0; }  // the process that begins checkpoints
  void log(LogLevel level, const std::string& msg) const;
  Status open_held_out();
  std::string epochs_end_early() const;  // a warning when data.epochs ends the run before `steps`
  Status open_state();
  Status check_processes_agree();
  void log_start() const;
  void open_tensorboard();
  void open_checkpoints();
  Result<Next> next_batch();
  Status train_step();
  Result<JobResult> finish();
  Status checkpoint(bool wait = true);
  Status evaluate();
  void curve(long step, const Scalars& scalars);

  const JobSpec& spec_;
  const std::string job_dir_, ckpt_root_;
  const JobHooks& hooks_;
  Requests requests_;
  // Declared in the order they are built, so each is destroyed after what uses it (as the old
  // function's locals were): the checkpoint writer before the executor, the executor before the
  // run directory's lock.
  ModelConfig cfg_;
  Nodes nodes_;
  std::unique_ptr<FileLock> held_;  // the run's directory, by the lead process
  std::unique_ptr<Executor> ex_;
  bool sharded_ = false;            // each process holds its part of the optimizer state
  std::unique_ptr<DataSource> data_;
  std::optional<HeldOutSet> held_out_;
  std::string resumed_;             // the checkpoint this run resumes from, if any
  TrainerState state_;
  JobResult result_;
  double flops_per_token_ = 0;
  std::unique_ptr<TensorBoardWriter> tb_;
  long tb_missing_from_ = 0;  // the first step a failed write left out of the event file (0: none)
  std::unique_ptr<JobCheckpoints> checkpoints_;  // a writer in flight reads the executor's store
  Batch batch_;
  double seconds_ = 0;  // trained by this run
  long tokens_ = 0;
};

}  // namespace mt

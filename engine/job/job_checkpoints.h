// A job's checkpoints. Each is taken once the step's updates are done (the executor synced):
// written there and then, or, for the periodic ones of a job that allows it, while the next
// steps train (checkpoint_in_flight.h: their updates follow the writer). Each is logged with
// its bytes, seconds, bandwidth and the pause it cost the training; hooks.on_checkpoint hears of
// it once it is published. A checkpoint expected to outlast hooks.checkpoint_bound_s (a stop's
// wait) is warned about before it starts.
#pragma once
#include <memory>
#include <string>

#include "engine/exec/executor.h"
#include "engine/io/checkpoint_in_flight.h"
#include "engine/job/job.h"

namespace mt {

class JobCheckpoints {
 public:
  struct Options {
    std::string root;       // the job's checkpoints directory
    int keep = 0;           // checkpoint.keep
    bool writes = true;     // this process writes checkpoints (rank 0)
    bool overlap = false;   // periodic checkpoints may be written while training goes on
    long saved_step = -1;   // the step of the checkpoint on disk (-1: none)
    std::string saved;      // its directory ("" if none)
  };
  using Log = std::function<void(LogLevel, const std::string&)>;
  // Writes the checkpoint of a state between steps (keeping that of step `best` too): its directory.
  using Write = std::function<Result<std::string>(const TrainerState&, long best)>;
  JobCheckpoints(Options o, const ModelConfig& cfg, Executor& ex, const JobHooks& hooks, Write write, Log log)
      : o_(std::move(o)), cfg_(cfg), ex_(ex), hooks_(hooks), write_(std::move(write)), log_(std::move(log)) {}

  // The checkpoint of `state` after the executor's sync (none when its step is the one saved
  // last; keeping the checkpoint of step `best` too), then hooks.on_checkpoint. `wait` false: a
  // periodic checkpoint, which may still be being written when this returns (told once it lands).
  Status save(const TrainerState& state, long best, bool wait);
  // Waits for the checkpoint in flight, if any, and tells of it.
  Status land();
  // Tells of the checkpoint in flight if its writer has finished (between steps: it is told
  // within a step of its publish).
  Status poll() { return in_flight_ && in_flight_->done() ? land() : Status::Ok(); }

  long saved_step() const { return o_.saved_step; }
  // After an evaluation at state.step: when that step is already checkpointed (a run that went on
  // only to make the evaluation a stop cut short), its trainer_state.json takes the evaluation.
  Status record_evaluation(const TrainerState& state);
  const std::string& saved() const { return o_.saved; }  // the last published ("" if none)

 private:
  void warn_if_beyond_bound();
  void report(long step, const CheckpointCost& c, double synced_s, bool beside);

  Options o_;
  const ModelConfig& cfg_;
  Executor& ex_;
  const JobHooks& hooks_;
  Write write_;
  Log log_;
  std::unique_ptr<CheckpointInFlight> in_flight_;
  double synced_s_ = 0;        // the in-flight one's wait for the step's updates
  uint64_t last_bytes_ = 0;    // the last checkpoint's size
  double last_gbps_ = 0;       // and its bandwidth
};

}  // namespace mt

// A checkpoint written while training goes on. A checkpoint of step s must hold what every unit
// held after step s, and step s+1 changes a unit only in its optimizer update: so the writer
// starts as soon as step s's updates are done, the next step's forward and backward run beside
// it, and the optimizer waits, before it updates unit u, until the writer holds u's bytes (the
// store's update gate, update_gate.h). The writer takes the units in the optimizer's order, so
// the updates follow it instead of waiting for the whole checkpoint; what they waited is the
// checkpoint's stall, reported with its bytes and bandwidth. A failed writer opens the gate (the
// training goes on) and the previous checkpoint stays the latest.
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "engine/io/checkpoint.h"
#include "engine/optim/update_gate.h"

namespace mt {

// What one checkpoint cost.
struct CheckpointCost {
  uint64_t bytes = 0;          // the files written
  double write_seconds = 0;    // from the start to the publish
  double captured_seconds = 0; // from the start to the last unit captured: no update waits past it
  double updates_waited = 0;   // the optimizer's wait for the writer (0 when written in one go)
  double gbps() const { return write_seconds > 0 ? double(bytes) / write_seconds / 1e9 : 0; }
};

class CheckpointInFlight {
 public:
  // Starts the checkpoint of `state` under root (save_checkpoint's arguments) on a thread of its
  // own and installs its gate in the store. The store's executor must be idle (synced): nothing
  // updates a unit, or reads the store's gate, while this is called. A store on the NVMe tier is
  // refused (its window is the optimizer's: checkpoint it with save_checkpoint).
  static Result<std::unique_ptr<CheckpointInFlight>> start(const std::string& root, const ModelConfig& cfg,
                                                           HostStore& store, const TrainerState& state, int keep,
                                                           long also_keep);
  ~CheckpointInFlight();  // waits for the writer: a checkpoint it finishes is published
  CheckpointInFlight(const CheckpointInFlight&) = delete;
  CheckpointInFlight& operator=(const CheckpointInFlight&) = delete;

  long step() const { return step_; }
  bool done() const { return done_; }  // the writer has finished: finish() will not wait
  // Waits for the writer: the published directory, or why it failed.
  Result<std::string> finish();
  CheckpointCost cost() const;  // once finished

 private:
  CheckpointInFlight(long step, size_t units) : step_(step), gate_(std::make_shared<UpdateGate>(units)) {}

  long step_;
  std::shared_ptr<UpdateGate> gate_;
  std::thread writer_;
  Result<std::string> written_ = std::string();
  std::atomic<bool> done_{false};
  CheckpointCost cost_;
};

}  // namespace mt

#include "engine/io/checkpoint_in_flight.h"

#include <chrono>

#include "engine/base/disk_usage.h"

namespace mt {

Result<std::unique_ptr<CheckpointInFlight>> CheckpointInFlight::start(const std::string& root, const ModelConfig& cfg,
                                                                      HostStore& store, const TrainerState& state,
                                                                      int keep, long also_keep) {
  if (store.tier())
    return failed_precondition("a store on the NVMe tier is checkpointed between steps, not while training goes on");
  std::unique_ptr<CheckpointInFlight> c(new CheckpointInFlight(state.step, store.num_units()));
  store.set_update_gate(c->gate_);
  c->writer_ = std::thread([c = c.get(), root, cfg, &store, state, keep, also_keep] {
    const auto t0 = std::chrono::steady_clock::now();
    c->written_ = save_checkpoint(root, cfg, store, state, keep, also_keep, [c, t0](size_t u) {
      c->gate_->capture(u);
      c->cost_.captured_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
    c->gate_->open();  // a failed writer holds no unit back
    c->cost_.write_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (c->written_.ok()) c->cost_.bytes = tree_bytes(*c->written_);
    c->done_ = true;
  });
  return c;
}

CheckpointInFlight::~CheckpointInFlight() {
  if (writer_.joinable()) writer_.join();
}

Result<std::string> CheckpointInFlight::finish() {
  if (writer_.joinable()) writer_.join();
  cost_.updates_waited = gate_->waited_seconds();
  return written_;
}

CheckpointCost CheckpointInFlight::cost() const { return cost_; }

}  // namespace mt

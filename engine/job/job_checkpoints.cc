#include "engine/job/job_checkpoints.h"

#include <chrono>
#include <cstdio>

#include "engine/base/disk_usage.h"

namespace mt {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
std::string fixed(double v, int digits) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}
}  // namespace

Status JobCheckpoints::save(const TrainerState& state, long best, bool wait) {
  if (state.step != o_.saved_step) {
    const auto t0 = std::chrono::steady_clock::now();
    MT_RETURN_IF_ERROR(ex_.sync());  // a failed update is reported here too
    MT_RETURN_IF_ERROR(land());      // one writer at a time
    const double synced = seconds_since(t0);
    if (o_.writes) {
      warn_if_beyond_bound();
      if (o_.overlap && !wait) {  // told when it lands
        MT_ASSIGN_OR_RETURN(in_flight_, CheckpointInFlight::start(o_.root, cfg_, ex_.store(), state, o_.keep, best));
        synced_s_ = synced;
        o_.saved_step = state.step;
        return Status::Ok();
      }
      const auto w0 = std::chrono::steady_clock::now();
      MT_ASSIGN_OR_RETURN(o_.saved, write_(state, best));
      report(state.step, {tree_bytes(o_.saved), seconds_since(w0), 0}, synced, false);
    }
    o_.saved_step = state.step;
  }
  if (in_flight_) return wait ? land() : Status::Ok();  // of this step: told as it lands
  if (hooks_.on_checkpoint) hooks_.on_checkpoint(o_.saved, state.step);
  return Status::Ok();
}

Status JobCheckpoints::record_evaluation(const TrainerState& state) {
  if (!o_.writes || in_flight_ || state.step != o_.saved_step || o_.saved.empty()) return Status::Ok();
  return update_trainer_state(o_.saved, state, ex_.store());
}

Status JobCheckpoints::land() {
  if (!in_flight_) return Status::Ok();
  Result<std::string> dir = in_flight_->finish();
  const long step = in_flight_->step();
  const CheckpointCost cost = in_flight_->cost();
  in_flight_.reset();
  MT_RETURN_IF_ERROR(dir.status());
  o_.saved = *dir;
  report(step, cost, synced_s_, true);
  if (hooks_.on_checkpoint) hooks_.on_checkpoint(o_.saved, step);
  return Status::Ok();
}

// "checkpoint DIR: 1.20 GB in 2.0 s (0.60 GB/s) beside training; training paused 0.30 s (...)"
void JobCheckpoints::report(long step, const CheckpointCost& c, double synced_s, bool beside) {
  last_bytes_ = c.bytes;
  if (c.gbps() > 0) last_gbps_ = c.gbps();
  const double paused = synced_s + (beside ? c.updates_waited : c.write_seconds);
  if (hooks_.on_checkpoint_cost) hooks_.on_checkpoint_cost({step, c.bytes, c.write_seconds, paused, beside});
  std::string line = "checkpoint " + o_.saved + ": " + fixed(double(c.bytes) / 1e9, 2) + " GB in " +
                     fixed(c.write_seconds, 2) + " s (" + fixed(c.gbps(), 2) + " GB/s)";
  if (beside)
    line += " beside training; training paused " + fixed(paused, 2) + " s (" + fixed(synced_s, 2) +
            " s for the step's updates, " + fixed(c.updates_waited, 2) + " s of updates waiting for the writer)";
  else
    line += "; training paused " + fixed(paused, 2) + " s";
  log_(LogLevel::kInfo, line);
}

void JobCheckpoints::warn_if_beyond_bound() {
  if (hooks_.checkpoint_bound_s <= 0 || last_gbps_ <= 0) return;  // nothing to go by before the first
  const double expected = double(last_bytes_) / 1e9 / last_gbps_;
  if (expected <= hooks_.checkpoint_bound_s) return;
  log_(LogLevel::kWarning, "this checkpoint is expected to take " + fixed(expected, 1) + " s (" +
                               fixed(double(last_bytes_) / 1e9, 2) + " GB at the " + fixed(last_gbps_, 2) +
                               " GB/s the last one reached), beyond the " + fixed(hooks_.checkpoint_bound_s, 1) +
                               " s a stop waits for one (--shutdown_timeout): a stop while it is written keeps "
                               "the previous checkpoint and loses the steps since");
}

}  // namespace mt

// What a checkpoint costs the training (step --checkpoint-stall DIR): K steps alone, K steps after a
// checkpoint written between steps, and K steps beside a checkpoint written while they train
// (checkpoint_in_flight.h), each timed to the executor's sync; the stall is each one's time
// over the K steps alone. K covers the checkpoint's write with two steps to spare. Set against
// the target max(one step, write seconds - one step): the least a consistent checkpoint allows
// once the writer and the steps share the host.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "bench/bench.h"
#include "engine/io/checkpoint_in_flight.h"

namespace mt::bench {

Result<Json> measure_checkpoint_stall(Executor& ex, const ModelConfig& cfg, const std::function<Status()>& step,
                                      const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string root = (fs::path(dir) / "megatrain-bench-checkpoints").string();
  std::error_code ec;
  fs::remove_all(root, ec);
  TrainerState st;
  auto steps = [&](int k) -> Result<double> {  // k steps to the executor's sync
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < k; ++i) MT_RETURN_IF_ERROR(step());
    MT_RETURN_IF_ERROR(ex.sync());
    return seconds_since(t0);
  };
  MT_ASSIGN_OR_RETURN(double one, steps(1));
  // Between steps: its write time sizes K.
  st.step = 1;
  auto t0 = std::chrono::steady_clock::now();
  MT_RETURN_IF_ERROR(save_checkpoint(root, cfg, ex.store(), st, 2).status());
  const double write_s = seconds_since(t0);
  const int k = int(std::clamp(std::ceil(write_s / std::max(one, 1e-6)) + 2, 2.0, 64.0));
  MT_ASSIGN_OR_RETURN(const double alone, steps(k));
  st.step = 2;
  t0 = std::chrono::steady_clock::now();
  MT_RETURN_IF_ERROR(save_checkpoint(root, cfg, ex.store(), st, 2).status());
  MT_RETURN_IF_ERROR(steps(k).status());
  const double between = seconds_since(t0);
  // Beside the steps.
  st.step = 3;
  t0 = std::chrono::steady_clock::now();
  MT_ASSIGN_OR_RETURN(auto in_flight, CheckpointInFlight::start(root, cfg, ex.store(), st, 2, 0));
  MT_RETURN_IF_ERROR(steps(k).status());
  MT_RETURN_IF_ERROR(in_flight->finish().status());
  const double beside = seconds_since(t0);
  const CheckpointCost c = in_flight->cost();
  fs::remove_all(root, ec);
  const double step_s = alone / k;
  Json out = Json::object();
  out.set("checkpoint_bytes", int64_t(c.bytes));
  out.set("checkpoint_steps_timed", k);
  out.set("checkpoint_write_s", write_s);                       // between steps, the first one
  out.set("checkpoint_write_gbps", double(c.bytes) / write_s / 1e9);
  out.set("checkpoint_beside_write_s", c.write_seconds);        // while the steps ran
  out.set("checkpoint_stall_between_s", between - alone);       // training paused, written between steps
  out.set("checkpoint_stall_beside_s", beside - alone);         // written beside the steps
  out.set("checkpoint_updates_waited_s", c.updates_waited);     // of which updates waiting for the writer
  out.set("checkpoint_stall_target_s", std::max(step_s, write_s - step_s));
  return out;
}

}  // namespace mt::bench

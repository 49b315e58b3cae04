// The StreamingExecutor's two helper threads and the schedule they share.
//  * The use sequence: every unit use of a step in order (forward 0..L, head [with the
//    embedding when tied], backward L..1), each assigned a weight slot. A unit still resident
//    from its previous use is reused without a copy; otherwise the least recently used slot
//    is refilled.
//  * The uploader thread walks the sequence, filling each slot as soon as (a) the previous
//    user of that slot has released it and (b) the optimizer has finished updating the unit
//    from the previous step; it records an H2D event the compute side waits on.
//  * The optimizer thread takes each unit's gradient as its D2H copy lands, computes its sum
//    of squares, and — once all units have landed — clips by the global norm and updates the
//    units in order 0..U-1 (or, with update_during_backward, each unit as it lands).
#pragma once
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/backend.h"
#include "engine/host_store.h"
#include "engine/optimizer.h"
#include "engine/thread_pool.h"

namespace mt {

struct UnitUse {
  int unit = 0;
  int slot = 0;
  bool fetch = true;     // false: the unit is still resident in `slot` from an earlier use
  int prev_of_slot = -1; // the previous use of the same slot in this step (-1: none)
};

// Builds the use sequence for L decoder layers, K slots, tied or untied embeddings.
std::vector<UnitUse> build_use_sequence(int num_layers, int slots, bool tied);

struct PipelineConfig {
  OptimizerConfig optimizer;
  bool update_during_backward = false;
  int optimizer_threads = 0;
  bool tied = false;
};

class StreamingPipeline {
 public:
  StreamingPipeline(Backend& backend, HostStore& store, const std::vector<ParamSchema>& units,
                    std::vector<float*> slots, std::vector<UnitUse> uses, const PipelineConfig& cfg,
                    void* tied_grad_host);
  ~StreamingPipeline();

  const std::vector<UnitUse>& uses() const { return uses_; }
  // Bytes the uses [first, last] fetch from the host.
  uint64_t fetch_bytes(int first, int last) const;
  float* slot_of(int use) const { return slots_[size_t(uses_[size_t(use)].slot)]; }

  void begin_step(long step, float lr);  // step: 1-based index of the step starting
  // Compute side: blocks until use's weights are on the device. Adds the seconds waited to
  // copy_wait / optimizer_wait.
  void wait_ready(int use, double& copy_wait, double& optimizer_wait);
  void release(int use);                  // compute finished with the use's weights
  void end_step();                        // compute finished the step's work
  // A unit's gradient (or the LM head's share of a tied embedding's) is in flight to the host.
  void grads_sent(int unit, EventPtr landed, bool tied_part);
  // Waits until every update of every step begun so far is done.
  Status sync();
  void mark_all_updated(long step);  // after loading a checkpoint at `step`
  double take_optimizer_seconds();
  double last_grad_norm();  // global norm of the latest completed update

 private:
  void uploader_loop();
  void optimizer_loop();
  void update_phase(long step, float lr);
  void update_unit(size_t u, long step, float lr, float clip);
  void merge_tied();

  Backend& backend_;
  HostStore& store_;
  const std::vector<ParamSchema>& units_;
  std::vector<float*> slots_;
  std::vector<UnitUse> uses_;
  PipelineConfig cfg_;
  void* tied_grad_host_;
  ThreadPool pool_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  long step_ = 0;           // step the compute side is in (or last began)
  long uploaded_step_ = 0;  // last step whose uploads the uploader has issued
  float lr_ = 0;
  std::vector<EventPtr> ready_, released_;
  std::vector<double> opt_ready_time_;   // per use: when the unit's update was available
  EventPtr prev_step_done_;
  std::vector<long> updated_;            // per unit: last step whose update is applied
  struct Landing {
    int unit;
    EventPtr event;
    bool tied_part;
    long step;
    float lr;
  };
  std::deque<Landing> landings_;
  std::vector<double> sumsq_;
  int landed_ = 0;
  double optimizer_seconds_ = 0;
  double last_grad_norm_ = 0;
  std::thread uploader_, optimizer_;
};

}  // namespace mt

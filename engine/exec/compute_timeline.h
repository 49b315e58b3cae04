// ComputeTimeline: a step's compute and stall times measured on the compute stream's own clock
// (Backend::elapsed between events recorded on it), not on the host thread that enqueues the
// work — which on an asynchronous device runs ahead and sleeps at other moments than the
// device. Spans are recorded as the step is enqueued and summed once its compute has run.
//  * busy spans: a unit use's (or the embedding backward's) work, begin to end;
//  * stalls: from the compute stream finishing what came before until what it waited for
//    (a copy, or the host enqueueing the next work) let it go on. A stall inside a busy span
//    (a free gradient slot, a layer input from the host) is subtracted from that busy time.
#pragma once
#include <vector>

#include "engine/backend/backend.h"

namespace mt {

class ComputeTimeline {
 public:
  explicit ComputeTimeline(Backend& b) : b_(b) {}

  EventPtr mark() { return b_.record(StreamKind::kCompute); }
  void begin_step();
  void begin_busy(bool forward);
  void end_busy();
  // `from` marked before the host began waiting for what it now waits on: the compute stream
  // waits for `ready`; the time it idles counts as a stall. optimizer_bound: seconds of it the
  // host spent waiting for an optimizer update (the optimizer's share, at most the stall).
  void stall_until(const EventPtr& from, const EventPtr& ready, double optimizer_bound = 0);
  void wait(const EventPtr& ready) { stall_until(mark(), ready); }
  EventPtr end_step();  // the event to wait for before take()

  struct Totals {
    double step = 0, compute = 0, forward_compute = 0, copy_wait = 0, optimizer_wait = 0;
  };
  Totals take();  // after end_step()'s event completed; clears the spans

 private:
  struct Span {
    EventPtr from, to;
    bool stall, inside_busy, forward;
    double optimizer_bound;
  };
  Backend& b_;
  EventPtr step_begin_, step_end_, busy_from_;
  bool busy_ = false, forward_ = false;
  std::vector<Span> spans_;
};

}  // namespace mt

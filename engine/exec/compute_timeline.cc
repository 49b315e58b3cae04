#include "engine/exec/compute_timeline.h"

#include <algorithm>

namespace mt {

void ComputeTimeline::begin_step() {
  spans_.clear();
  step_begin_ = mark();
}

void ComputeTimeline::begin_busy(bool forward) {
  busy_from_ = mark();
  busy_ = true;
  forward_ = forward;
}

void ComputeTimeline::end_busy() {
  spans_.push_back({busy_from_, mark(), false, false, forward_, 0});
  busy_ = false;
}

void ComputeTimeline::stall_until(const EventPtr& from, const EventPtr& ready, double optimizer_bound) {
  b_.stream_wait(StreamKind::kCompute, ready);
  spans_.push_back({from, mark(), true, busy_, forward_, optimizer_bound});
}

EventPtr ComputeTimeline::end_step() {
  step_end_ = mark();
  return step_end_;
}

ComputeTimeline::Totals ComputeTimeline::take() {
  Totals t;
  t.step = b_.elapsed(step_begin_, step_end_);
  for (const Span& s : spans_) {
    const double d = std::max(0.0, b_.elapsed(s.from, s.to));
    if (!s.stall) {
      t.compute += d;
      if (s.forward) t.forward_compute += d;
      continue;
    }
    const double opt = std::min(d, s.optimizer_bound);
    t.optimizer_wait += opt;
    t.copy_wait += d - opt;
    if (!s.inside_busy) continue;
    t.compute -= d;
    if (s.forward) t.forward_compute -= d;
  }
  spans_.clear();
  return t;
}

}  // namespace mt

// The progress display shared by `train` and `watch`: a live line on a terminal, plain lines
// otherwise, or one JSON object per step with --json.
#pragma once
#include <string>

#include "engine/base/json.h"

namespace mt::cli {

struct ProgressEvent {
  long step = 0, steps = 0;
  double loss = 0, tokens_per_second = 0, step_seconds = 0;
  double h2d_gbps = 0, d2h_gbps = 0, eta_seconds = 0;
};

class Progress {
 public:
  explicit Progress(bool json);
  void step(const ProgressEvent& e);
  void message(const std::string& text);  // a log line that does not break the live line
  void summary(const Json& fields);       // last object (JSON) or a short report (human)

 private:
  bool json_, tty_;
  bool live_ = false;
};

}  // namespace mt::cli

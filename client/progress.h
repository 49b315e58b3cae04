// The progress display shared by `train` and `watch`: a live line on a terminal, plain lines
// otherwise, or one JSON object per step with --json.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

#include "engine/base/json.h"

namespace mt::cli {

struct ProgressEvent {
  long step = 0, steps = 0;
  double loss = 0, tokens_per_second = 0, step_seconds = 0;
  double h2d_gbps = 0, d2h_gbps = 0, eta_seconds = 0;
  double grad_norm = 0, learning_rate = 0;  // the step's update: norm before clipping, its LR
  bool grad_clipped = false;                // clipping scaled it
  double aux_loss = -1;                     // a mixture of experts (experts_total > 0): its load-balancing loss
  long experts_routed = 0, experts_total = 0;
};

// A held-out evaluation (spec.eval) as `train` and `watch` show it.
struct EvalEvent {
  long step = 0;
  double loss = 0;
  bool best = false;      // the lowest so far
  long best_step = 0;     // the lowest's step and loss
  double best_loss = 0;
};

class Progress {
 public:
  explicit Progress(bool json);
  void step(const ProgressEvent& e);
  void eval(const EvalEvent& e);  // its own line (or JSON object: "event": "eval")
  void message(const std::string& text);  // a log line that does not break the live line
  void summary(const Json& fields);       // last object (JSON) or a short report (human)

 private:
  bool json_, tty_;
  bool live_ = false;
};

// A progress bar on stderr for work measured in input bytes (`tokenize`): percent, bytes,
// tokens, tokens/s and ETA. Redrawn in place at most 10 times a second on a terminal; elsewhere
// (a log, a pipe) one plain line every 5 s.
class ByteProgress {
 public:
  ByteProgress(std::string what, uint64_t total_bytes);
  void update(uint64_t bytes, uint64_t tokens);
  void finish(uint64_t bytes, uint64_t tokens);  // the final line, always drawn

 private:
  void draw(uint64_t bytes, uint64_t tokens, bool last);

  std::string what_;
  uint64_t total_;
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace mt::cli

// The optimizer's side of a checkpoint written while training goes on: a checkpoint of step s
// must hold what each unit held after step s, so the optimizer waits, before it changes unit u
// in step s+1, until the writer has captured u (written its bytes). The writer captures the
// units in the optimizer's order, so the next step's updates follow it instead of waiting for
// the whole checkpoint; the time the optimizer spent waiting is the checkpoint's stall.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <vector>

namespace mt {

class UpdateGate {
 public:
  explicit UpdateGate(size_t units) : captured_(units, 0) {}
  // The writer: unit u's bytes are written; the optimizer may change it.
  void capture(size_t u);
  // The writer, finished or failed: nothing waits any more.
  void open();
  // The optimizer: blocks until unit u is captured.
  void wait(size_t u);
  double waited_seconds() const;  // the optimizer's total wait, so far
  bool captured(size_t u) const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<char> captured_;
  double waited_ = 0;
};

}  // namespace mt

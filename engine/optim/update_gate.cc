#include "engine/optim/update_gate.h"

#include <algorithm>
#include <chrono>

namespace mt {

void UpdateGate::capture(size_t u) {
  std::lock_guard<std::mutex> l(mu_);
  captured_[u] = 1;
  cv_.notify_all();
}

void UpdateGate::open() {
  std::lock_guard<std::mutex> l(mu_);
  std::fill(captured_.begin(), captured_.end(), 1);
  cv_.notify_all();
}

void UpdateGate::wait(size_t u) {
  std::unique_lock<std::mutex> l(mu_);
  if (captured_[u]) return;
  const auto t0 = std::chrono::steady_clock::now();
  cv_.wait(l, [&] { return captured_[u] != 0; });
  waited_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double UpdateGate::waited_seconds() const {
  std::lock_guard<std::mutex> l(mu_);
  return waited_;
}

bool UpdateGate::captured(size_t u) const {
  std::lock_guard<std::mutex> l(mu_);
  return captured_[u] != 0;
}

}  // namespace mt

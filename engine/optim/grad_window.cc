#include "engine/optim/grad_window.h"

namespace mt {

GradWindow::GradWindow(char* region, size_t buffers, size_t each, size_t units) : held_(units, nullptr), all_(buffers) {
  for (size_t b = buffers; b-- > 0;) free_.push_back(region + b * each);  // taken from the first
}

void* GradWindow::take(size_t u) {
  std::unique_lock<std::mutex> l(mu_);
  if (held_[u]) return held_[u];
  cv_.wait(l, [&] { return !free_.empty(); });
  held_[u] = free_.back();
  free_.pop_back();
  return held_[u];
}

void* GradWindow::held(size_t u) const {
  std::lock_guard<std::mutex> l(mu_);
  return held_[u];
}

void GradWindow::give_back(size_t u) {
  std::lock_guard<std::mutex> l(mu_);
  if (!held_[u]) return;
  free_.push_back(held_[u]);
  held_[u] = nullptr;
  cv_.notify_all();
}

}  // namespace mt

// Gradients held only while they are used (the NVMe tier's grad_window). When every unit is
// updated as its gradient lands (grad_clip 0), a unit's gradient is read once, by its own update,
// right after it lands: so the tiered units can share a few gradient buffers instead of holding
// one each (dense-120b: 240 GB of bf16 gradients become a few GB). The backward takes a buffer
// for a unit before its gradient is copied down, waiting while all are taken; the optimizer
// gives it back once the unit is updated (or its update refused).
#pragma once
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <vector>

namespace mt {

class GradWindow {
 public:
  // `buffers` buffers of `each` bytes, cut from `region` (owned by the caller), for `units` units.
  GradWindow(char* region, size_t buffers, size_t each, size_t units);
  // A buffer for unit u's gradient: the one it holds, else the next one given back (blocks).
  void* take(size_t u);
  void* held(size_t u) const;  // the buffer unit u holds, or nullptr
  void give_back(size_t u);    // nothing when it holds none
  size_t buffers() const { return all_; }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<void*> free_;
  std::vector<void*> held_;  // per unit
  size_t all_;
};

}  // namespace mt

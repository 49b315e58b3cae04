// A bound on the streams of one kind the daemon holds open at once (the readers' WatchJob and
// StreamLogs; the admins' PushData apart, so readers cannot starve the pushes). Each holds memory
// and a log follower a file descriptor: a client that opens them without end must not exhaust
// either (a job that cannot open its next checkpoint fails). One past the bound is refused
// RESOURCE_EXHAUSTED, naming the bound and its flag; a stream frees its slot when done.
#pragma once
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "engine/base/status.h"

namespace mt::server {

class StreamSlots {
  struct Count {  // under one lock, so the gauge is told the counts in their order
    std::mutex mu;
    int open = 0;
    std::function<void(int)> changed;  // told each new count (a gauge); may be empty
    void add(int d) {
      std::lock_guard<std::mutex> lock(mu);
      open += d;
      if (changed) changed(open);
    }
  };

 public:
  StreamSlots(int max, std::string what, std::function<void(int)> changed = {})
      : max_(max), what_(std::move(what)), count_(std::make_shared<Count>()) {
    count_->changed = std::move(changed);
  }

  // One stream's slot: held by its reactor, released when the reactor is deleted.
  class Slot {
   public:
    Slot() = default;
    explicit Slot(std::shared_ptr<Count> count) : count_(std::move(count)) {}
    Slot(Slot&&) noexcept = default;
    Slot& operator=(Slot&& o) noexcept {
      release();
      count_ = std::move(o.count_);
      return *this;
    }
    ~Slot() { release(); }

   private:
    void release() {
      if (count_) count_->add(-1);
      count_.reset();
    }
    std::shared_ptr<Count> count_;
  };

  Result<Slot> take(const char* rpc) {
    {
      std::lock_guard<std::mutex> lock(count_->mu);
      if (count_->open < max_) {
        count_->open += 1;
        if (count_->changed) count_->changed(count_->open);
        return Slot(count_);
      }
    }
    return resource_exhausted(std::string(rpc) + ": the daemon holds its limit of " + std::to_string(max_) + " open " +
                              what_ + " (--max_streams); retry when one ends");
  }
  int open() const {
    std::lock_guard<std::mutex> lock(count_->mu);
    return count_->open;
  }

 private:
  const int max_;
  const std::string what_;
  std::shared_ptr<Count> count_;  // shared with the slots, which may outlive this
};

}  // namespace mt::server

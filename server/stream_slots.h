// A bound on the streams of one kind the daemon holds open at once (the readers' WatchJob and
// StreamLogs; the admins' PushData apart, so readers cannot starve the pushes). Each holds memory
// and a log follower a file descriptor: a client that opens them without end must not exhaust
// either (a job that cannot open its next checkpoint fails). One past the bound is refused
// RESOURCE_EXHAUSTED, naming the bound and its flag; a stream frees its slot when done.
#pragma once
#include <atomic>
#include <memory>
#include <string>

#include "engine/base/status.h"

namespace mt::server {

class StreamSlots {
 public:
  StreamSlots(int max, std::string what) : max_(max), what_(std::move(what)), open_(std::make_shared<std::atomic<int>>(0)) {}

  // One stream's slot: held by its reactor, released when the reactor is deleted.
  class Slot {
   public:
    Slot() = default;
    explicit Slot(std::shared_ptr<std::atomic<int>> open) : open_(std::move(open)) {}
    Slot(Slot&&) noexcept = default;
    Slot& operator=(Slot&& o) noexcept {
      release();
      open_ = std::move(o.open_);
      return *this;
    }
    ~Slot() { release(); }

   private:
    void release() {
      if (open_) open_->fetch_sub(1);
      open_.reset();
    }
    std::shared_ptr<std::atomic<int>> open_;
  };

  Result<Slot> take(const char* rpc) {
    if (open_->fetch_add(1) >= max_) {
      open_->fetch_sub(1);
      return resource_exhausted(std::string(rpc) + ": the daemon holds its limit of " + std::to_string(max_) + " open " +
                                what_ + " (--max_streams); retry when one ends");
    }
    return Slot(open_);
  }
  int open() const { return open_->load(); }

 private:
  const int max_;
  const std::string what_;
  std::shared_ptr<std::atomic<int>> open_;  // shared with the slots, which may outlive this
};

}  // namespace mt::server

// An exclusive lock on a state directory: flock on STATE_DIR/megatraind.lock, which holds the
// holder's pid. Two daemons on one state directory would resume the same jobs (two trainers
// writing one job dir) and overwrite each other's megatraind.json; the second one is refused
// before it touches anything. The kernel releases the lock when its holder dies, even by kill -9.
#pragma once
#include <memory>
#include <string>

#include "engine/base/status.h"

namespace mt::server {

class StateLock {
 public:
  // FAILED_PRECONDITION naming the holder's pid when another process holds the lock.
  static Result<std::unique_ptr<StateLock>> acquire(const std::string& state_dir);
  ~StateLock();
  StateLock(const StateLock&) = delete;
  StateLock& operator=(const StateLock&) = delete;

 private:
  explicit StateLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace mt::server

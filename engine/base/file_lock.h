// An exclusive lock held through a file: flock on PATH, which holds the holder's pid. The kernel
// releases it when its holder dies, even by kill -9. Two processes must never write one
// directory's state at once: two megatraind on one state directory would resume the same jobs;
// two training runs on one --out would publish each other's checkpoints (both exit 0, one run's
// weights silently replaced by the other's). The second is refused before it touches anything.
#pragma once
#include <memory>
#include <string>

#include "engine/base/status.h"

namespace mt {

class FileLock {
 public:
  // FAILED_PRECONDITION when another process holds it: "<in_use> (pid N, holding 'PATH'); <remedy>".
  static Result<std::unique_ptr<FileLock>> acquire(const std::string& path, const std::string& in_use,
                                                   const std::string& remedy);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace mt

// What direct_io.cc shares with direct_read.cc: not for other callers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "engine/base/status.h"

namespace mt::io_detail {

// Records that O_DIRECT was refused for `path`: printed and kept for take_direct_io_notice, once
// per process.
void note_fallback(const std::string& path, const std::string& why);
// One more file written or read with (direct) or without O_DIRECT (file_io_counters).
void count_file(bool direct);
// openat(dir, name, flags | O_DIRECT | O_CLOEXEC | O_NOFOLLOW), or the injected refusal.
int open_direct(int dir, const std::string& name, int flags);
// The file `fd` has open, opened again with O_DIRECT (through /proc/self/fd: the same file, not
// whatever its path names now), or the injected refusal.
int reopen_direct(int fd, int flags);
uint64_t align_up(uint64_t n);  // to kDirectIoAlign

// Memory aligned to kDirectIoAlign (from 2 MiB up: 2 MiB, in huge pages, and reused by the next
// buffer of its size: up to 256 MiB kept), n rounded up to it; p is nullptr when allocation failed.
struct AlignedBuffer {
  explicit AlignedBuffer(size_t n);
  ~AlignedBuffer();
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  char* p = nullptr;

 private:
  size_t bytes_ = 0;
  bool huge_ = false;
};

// Runs work(item, buffer) for items [0, n) on min(threads, n) threads (the caller's among them),
// each with its own aligned buffer of buffer_bytes. After the first error no further item
// starts; that error is returned.
Status run_workers(int threads, size_t n, size_t buffer_bytes, const std::function<Status(size_t, char*)>& work);

}  // namespace mt::io_detail

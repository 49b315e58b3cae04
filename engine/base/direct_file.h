// A scratch file for direct I/O (O_DIRECT: no page cache between a buffer and the drive).
// Buffers, offsets and lengths must be multiples of kDirectAlign. The file has no name (O_TMPFILE;
// where a filesystem lacks it, a unique name unlinked at once): two jobs on one drive never meet,
// and a process killed at any moment leaves nothing behind. Creating refuses, naming the
// directory, a filesystem without direct I/O and one that is memory itself (tmpfs, ramfs: the
// state would sit in the host memory it is meant to spare), and reserves the file's bytes up
// front, so a full drive is refused when a job starts, not in the middle of a step.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/base/status.h"

namespace mt {

inline constexpr size_t kDirectAlign = 4096;
inline uint64_t direct_round_up(uint64_t bytes) { return (bytes + kDirectAlign - 1) / kDirectAlign * kDirectAlign; }

class DirectFile {
 public:
  DirectFile() = default;
  // A new scratch file in directory `dir`, `bytes` reserved.
  static Result<DirectFile> create_scratch(const std::string& dir, uint64_t bytes);
  DirectFile(DirectFile&& o) noexcept { *this = std::move(o); }
  DirectFile& operator=(DirectFile&& o) noexcept;
  DirectFile(const DirectFile&) = delete;
  DirectFile& operator=(const DirectFile&) = delete;
  ~DirectFile();

  // n bytes at offset, all of them (short transfers continue; EINTR retried). Errors name the
  // path, the offset and the length.
  Status read(void* buf, size_t n, uint64_t offset) const;
  Status write(const void* buf, size_t n, uint64_t offset) const;
  const std::string& path() const { return path_; }  // the directory, for messages

  // Tests: every create_scratch opens as on a filesystem whose O_DIRECT open answers `error`
  // (EINVAL: none), or as on tmpfs (`tmpfs`); 0 / false: as it is.
  static void set_faults_for_testing(int error, bool tmpfs);

 private:
  int fd_ = -1;
  std::string path_;
};

// Memory aligned for direct I/O (kDirectAlign), released when destroyed.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  static Result<AlignedBuffer> allocate(size_t bytes);
  AlignedBuffer(AlignedBuffer&& o) noexcept { *this = std::move(o); }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer();
  char* data() const { return p_; }
  size_t bytes() const { return bytes_; }

 private:
  char* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace mt

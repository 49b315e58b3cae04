// A directory held open by a file descriptor. Whatever is created, listed or removed through it
// happens in that directory, whatever its path names later: a rename, or a symlink swapped in for
// a directory above it, changes nothing. open_beneath confines a relative path a client supplied
// (ExportModel's out_dir) to a root without following a symlink at any component, so there is no
// check-then-use window between the path's check and the writes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/base/status.h"

namespace mt {

// A failed file-system call on `path` as a Status: "WHAT 'PATH': strerror". A full disk or quota
// (ENOSPC, EFBIG, EDQUOT) is RESOURCE_EXHAUSTED, anything else DATA_LOSS.
Status errno_status(const std::string& what, const std::string& path, int err);

class DirFd {
 public:
  DirFd() = default;
  ~DirFd();
  DirFd(DirFd&& o) noexcept;
  DirFd& operator=(DirFd&& o) noexcept;
  DirFd(const DirFd&) = delete;
  DirFd& operator=(const DirFd&) = delete;

  // PATH as given (the caller's own path: symlinks followed), created with its parents when
  // `create` and missing.
  static Result<DirFd> open(const std::string& path, bool create);
  // REL beneath ROOT, one component at a time, each created when `create` and missing, none a
  // symlink (openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS where the kernel has it, else
  // openat with O_NOFOLLOW). ROOT itself must not be a symlink. REL is relative, without "..";
  // empty components and "." are skipped. INVALID_ARGUMENT naming the component otherwise.
  static Result<DirFd> open_beneath(const std::string& root, const std::string& rel, bool create);

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }          // for messages
  std::string file(const std::string& name) const;           // path()/name, for messages

  Result<std::vector<std::string>> list() const;  // entry names, sorted, without "." and ".."
  bool has(const std::string& name) const;         // an entry (not following a symlink)
  Status remove(const std::string& name) const;    // a file (a symlink itself, not its target)
  uint64_t file_bytes() const;                     // the sizes of the regular files in it
  Status sync() const;                             // fsync: creations and renames durable

 private:
  DirFd(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

}  // namespace mt

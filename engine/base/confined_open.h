// Where the engine may open a path a client named. A daemon serving several users names its roots
// once, before any job (its data root, STATE_DIR/jobs, its NVMe roots); from then on every open
// of a path inside one of them stays inside that root, whatever symlinks lie below it — placed in
// a shard or model directory before the submit, or swapped in while the job runs. Outside the
// roots, and where none are named (the local CLI opens what its own user names), an open is a
// plain open(2).
//
// How: the path is opened beneath a descriptor of the root (openat2 with RESOLVE_BENEATH, which
// refuses a lookup that would leave it without opening anything there). RESOLVE_BENEATH also
// refuses every absolute symlink, even one that points back inside the root; such a path (and
// every path on kernels before 5.6) is first found without being opened (O_PATH) and kept only if
// what was found lies inside the root (its /proc/self/fd link), then that very object is opened
// (a file to create: by its name, no symlink followed, in the directory so found): the check is of
// the object, so no swap between check and use can change it, and nothing outside is opened — no
// device or FIFO a symlink names (the lookup itself still walks the symlink's path, so an automount
// on it is mounted). A root inside another (an NVMe
// directory in the data root) is itself opened beneath the outer one. Every open is non-blocking
// until it returns: a FIFO where a file was expected cannot hold a job.
#pragma once
#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "engine/base/status.h"

namespace mt {

// Replaces the roots (each resolved now; opened again at each use, so a root removed and made
// again, or mounted over, is the one used); an empty list ends the confinement. A root that
// cannot be resolved, or is not a directory, is an error and changes nothing.
Status confine_opens_to(const std::vector<std::string>& roots);

// open(2) under that rule: a descriptor, or -1 with errno, EXDEV for a path that leads outside
// its root, ENODEV (or ENXIO, as open(2) says of a socket) for a FIFO, device or socket inside one.
int open_confined(const std::string& path, int flags, mode_t mode = 0);

// /proc/self/fd/FD, and the file `fd` has open opened again through it with `flags`: the same
// file, never whatever its path names now.
std::string proc_fd_path(int fd);
int reopen_fd(int fd, int flags);

// A descriptor, closed when it goes out of scope.
class OwnedFd {
 public:
  explicit OwnedFd(int fd = -1) : fd_(fd) {}
  ~OwnedFd();
  OwnedFd(OwnedFd&& o) noexcept : fd_(o.release()) {}
  OwnedFd& operator=(OwnedFd&& o) noexcept;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// open_confined as a Status: `what` names the use ("cannot open"); an escape is INVALID_ARGUMENT
// naming the path (as the submit's own check says), a missing file NOT_FOUND, anything else as
// errno_status says.
Result<OwnedFd> open_confined_or_status(const std::string& what, const std::string& path, int flags, mode_t mode = 0);

// A data file opened for reading (confined as above), refused by name unless it is a regular
// file: a FIFO would hold the open until a writer came (it is opened without waiting for one),
// a device like /dev/zero would be read without end.
Result<OwnedFd> open_regular_file(const std::string& what, const std::string& path);

}  // namespace mt

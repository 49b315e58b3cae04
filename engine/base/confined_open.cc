#include "engine/base/confined_open.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <filesystem>
#include <memory>
#include <mutex>

#include "engine/base/dir_fd.h"

namespace mt {

namespace fs = std::filesystem;

namespace {

// A root is held by its resolved path and opened again for each open below it: a directory
// removed and made again (or a volume mounted over it after the start) is the one used, not the
// one the daemon saw first. The path came from the operator, so looking it up is trusted.
struct Root {
  fs::path path;  // resolved, normal
};
using Roots = std::vector<Root>;

std::mutex g_mu;
std::shared_ptr<const Roots> g_roots;  // replaced whole; an open in flight keeps the list it took

std::shared_ptr<const Roots> roots_now() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_roots;
}

// The path below `root` when `p` lies inside it (components compared), else nothing.
bool relative_to(const fs::path& p, const fs::path& root, fs::path& rel) {
  auto r = root.begin(), q = p.begin();
  for (; r != root.end(); ++r, ++q) {
    if (r->empty()) continue;  // the empty last component of "/a/b/"
    if (q == p.end() || *q != *r) return false;
  }
  rel.clear();
  for (; q != p.end(); ++q)
    if (!q->empty()) rel /= *q;
  if (rel.empty()) rel = ".";
  return true;
}

bool inside(const fs::path& p, const fs::path& root) {
  fs::path rel;
  return relative_to(p, root, rel);
}

// Where descriptor `fd` lies now ("" when /proc cannot say). An unnamed (O_TMPFILE) or deleted
// file reads "DIR/#N (deleted)": its directory is what counts.
fs::path where(int fd) {
  char buf[PATH_MAX];
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
  if (n <= 0) return {};
  std::string s(buf, size_t(n));
  constexpr std::string_view kDeleted = " (deleted)";
  if (s.size() > kDeleted.size() && s.compare(s.size() - kDeleted.size(), kDeleted.size(), kDeleted) == 0)
    s = fs::path(s.substr(0, s.size() - kDeleted.size())).parent_path().string();
  return fs::path(s);
}

// `rel` opened beneath the directory `dir`, never leaving it.
int open_below(int dir, const fs::path& rel, int flags, mode_t mode) {
#ifdef SYS_openat2
  open_how how{};
  how.flags = uint64_t(unsigned(flags));
  how.mode = ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) ? mode : 0;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  const long fd = ::syscall(SYS_openat2, dir, rel.c_str(), &how, sizeof how);
  // EXDEV: the lookup would leave the root, or met an absolute symlink (that may point back
  // inside); ENOSYS/EPERM: a kernel before 5.6 or a filter. Both: open, then look where it is —
  // except a creation refused by EXDEV, which would leave a file where it was refused.
  if (fd >= 0 || (errno != EXDEV && errno != ENOSYS && errno != EPERM)) return int(fd);
  if (errno == EXDEV && (flags & O_CREAT)) return -1;
#endif
  const int fd2 = ::openat(dir, rel.c_str(), flags | O_NONBLOCK | O_NOCTTY, mode);
  if (fd2 < 0) return -1;
  const fs::path at = where(fd2), root_now = where(dir);
  if (at.empty() || root_now.empty() || !inside(at, root_now)) {
    ::close(fd2);
    errno = EXDEV;
    return -1;
  }
  if (!(flags & O_NONBLOCK)) ::fcntl(fd2, F_SETFL, ::fcntl(fd2, F_GETFL) & ~O_NONBLOCK);
  return fd2;
}

int open_beneath(const Root& root, const fs::path& rel, int flags, mode_t mode) {
  const int dir = ::open(root.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return -1;
  const int fd = open_below(dir, rel, flags, mode);
  const int err = errno;
  ::close(dir);
  errno = err;
  return fd;
}

}  // namespace

Status confine_opens_to(const std::vector<std::string>& roots) {
  auto next = std::make_shared<Roots>();
  for (const std::string& r : roots) {
    std::error_code ec;
    Root root{fs::canonical(r, ec)};
    if (ec) return errno_status("cannot resolve the root", r, ec.value());
    if (!fs::is_directory(root.path, ec)) return invalid_argument("the root '" + r + "' is not a directory");
    next->push_back(std::move(root));
  }
  std::lock_guard<std::mutex> lock(g_mu);
  g_roots = next->empty() ? nullptr : std::shared_ptr<const Roots>(std::move(next));
  return Status::Ok();
}

int open_confined(const std::string& path, int flags, mode_t mode) {
  const std::shared_ptr<const Roots> roots = roots_now();
  if (roots) {
    std::error_code ec;
    const fs::path p = fs::absolute(path, ec).lexically_normal();
    const Root* best = nullptr;
    fs::path rel, best_rel;
    for (const auto& r : *roots)  // the innermost root that holds the path
      if (relative_to(p, r.path, rel) && (!best || r.path.string().size() > best->path.string().size())) {
        best = &r;
        best_rel = rel;
      }
    if (best) return open_beneath(*best, best_rel, flags, mode);
  }
  return ::open(path.c_str(), flags, mode);
}

OwnedFd::~OwnedFd() {
  if (fd_ >= 0) ::close(fd_);
}

OwnedFd& OwnedFd::operator=(OwnedFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

Result<OwnedFd> open_confined_or_status(const std::string& what, const std::string& path, int flags, mode_t mode) {
  const int fd = open_confined(path, flags, mode);
  if (fd >= 0) return OwnedFd(fd);
  const int err = errno;
  if (err == EXDEV)
    return invalid_argument(what + " '" + path + "': it leads outside the allowed roots (through a symlink)");
  if (err == ENOENT) return not_found(what + " '" + path + "': it does not exist");
  return errno_status(what, path, err);
}

}  // namespace mt

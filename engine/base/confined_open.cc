#include "engine/base/confined_open.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
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
// one the daemon saw first. The path came from the operator, so looking up an outermost root by
// it is trusted (one inside another is looked up beneath that one: open_root).
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
  const ssize_t n = ::readlink(proc_fd_path(fd).c_str(), buf, sizeof buf - 1);
  if (n <= 0) return {};
  std::string s(buf, size_t(n));
  constexpr std::string_view kDeleted = " (deleted)";
  if (s.size() > kDeleted.size() && s.compare(s.size() - kDeleted.size(), kDeleted.size(), kDeleted) == 0)
    s = fs::path(s.substr(0, s.size() - kDeleted.size())).parent_path().string();
  return fs::path(s);
}

// A FIFO, device or socket: never what a spec names below a root (training data, a model, a
// checkpoint), and opening one may wait forever or act on the device.
bool special(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ||
                                   S_ISSOCK(st.st_mode));
}

int refuse(int fd, int err) {
  ::close(fd);
  errno = err;
  return -1;
}

// `result` (a descriptor or -1) once `fd` is closed, with the errno `result` left.
int after_closing(int fd, int result) {
  const int err = errno;
  ::close(fd);
  errno = err;
  return result;
}

// `rel` looked up beneath `dir` without opening the file itself (O_PATH: no device is opened, no
// FIFO waited on, nothing created) and kept only if it lies inside `dir`; else -1, EXDEV.
int find_inside(int dir, const fs::path& rel, int flags) {
  const int fd = ::openat(dir, rel.c_str(), O_PATH | O_CLOEXEC | flags);
  if (fd < 0) return -1;
  const fs::path at = where(fd), root_now = where(dir);
  if (at.empty() || root_now.empty() || !inside(at, root_now)) return refuse(fd, EXDEV);
  return special(fd) ? refuse(fd, ENODEV) : fd;
}

// Where openat2 cannot say (an absolute symlink, which RESOLVE_BENEATH refuses even when it points
// back inside; a kernel before 5.6): the object is found and checked first, then opened as itself
// — a file to create by its name in its directory so found, following no symlink there; any other
// through its /proc/self/fd link. Nothing outside the root is ever opened, not even to be refused.
int open_found(int dir, const fs::path& rel, int flags, mode_t mode) {
  const bool tmpfile = (flags & O_TMPFILE) == O_TMPFILE, creates = tmpfile || (flags & O_CREAT);
  fs::path look = rel, name = ".";  // what is found first; what is then opened in it, if it creates
  if (creates && !tmpfile) {
    look = rel.has_parent_path() ? rel.parent_path() : fs::path(".");
    name = rel.filename();
  }
  const int found = find_inside(dir, look, creates ? O_DIRECTORY : flags & (O_NOFOLLOW | O_DIRECTORY));
  if (found < 0) return -1;
  if (creates) return after_closing(found, ::openat(found, name.c_str(), flags | O_NOFOLLOW, mode));
  struct stat st {};
  if ((flags & O_NOFOLLOW) && ::fstatat(found, "", &st, AT_EMPTY_PATH) == 0 && S_ISLNK(st.st_mode))
    return refuse(found, ELOOP);  // as open(2) says of a symlink with O_NOFOLLOW
  // Checked to be a regular file or a directory, so it is opened blocking: a file under a lease (a
  // share that Samba or knfsd also exports) waits for the lease's break instead of EWOULDBLOCK.
  return after_closing(found, reopen_fd(found, flags & ~(O_NOFOLLOW | O_NONBLOCK)));
}

// `rel` opened beneath the directory `dir`, never leaving it, and never a FIFO, device or socket
// (ENODEV). Non-blocking while it opens, so a FIFO where a file was expected is refused at once
// instead of holding the job until a writer comes.
int open_below(int dir, const fs::path& rel, int flags, mode_t mode) {
  const int opening = flags | O_NONBLOCK | O_NOCTTY;
  int fd = -1;
#ifdef SYS_openat2
  open_how how{};
  how.flags = uint64_t(unsigned(opening));
  how.mode = ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) ? mode : 0;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  fd = int(::syscall(SYS_openat2, dir, rel.c_str(), &how, sizeof how));
  // EXDEV: the lookup would leave the root, or met an absolute symlink (that may point back
  // inside); ENOSYS/EPERM: a kernel before 5.6 or a filter; EAGAIN: a ".." in the lookup raced a
  // rename or mount somewhere on the system (a Hugging Face cache's ../../blobs links), or the
  // file is under a lease that O_NONBLOCK will not wait for.
  if (fd < 0 && (errno == EXDEV || errno == ENOSYS || errno == EPERM || errno == EAGAIN))
    fd = open_found(dir, rel, opening, mode);
#else
  fd = open_found(dir, rel, opening, mode);
#endif
  if (fd < 0) return -1;
  if (special(fd)) return refuse(fd, ENODEV);
  const int now = ::fcntl(fd, F_GETFL), wanted = (flags & O_NONBLOCK) ? now | O_NONBLOCK : now & ~O_NONBLOCK;
  if (now != wanted) ::fcntl(fd, F_SETFL, wanted);
  return fd;
}

// The innermost root other than `self` that holds `p`, and the path below it.
const Root* innermost(const Roots& roots, const fs::path& p, const Root* self, fs::path& below) {
  const Root* best = nullptr;
  fs::path rel;
  for (const auto& r : roots)
    if (&r != self && !(self && r.path == self->path) && relative_to(p, r.path, rel) &&
        (!best || r.path.string().size() > best->path.string().size())) {
      best = &r;
      below = rel;
    }
  return best;
}

int open_beneath(const Roots& roots, const Root& root, const fs::path& rel, int flags, mode_t mode);

// A root's directory now. One inside another (an NVMe directory in the data root) is opened
// beneath the outer one, so whoever may write in the outer root cannot swap the inner one for a
// symlink to elsewhere; an outermost root is looked up by its name (the operator's).
int open_root(const Roots& roots, const Root& root) {
  fs::path rel;
  const Root* outer = innermost(roots, root.path, &root, rel);
  if (!outer) return ::open(root.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  return open_beneath(roots, *outer, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
}

int open_beneath(const Roots& roots, const Root& root, const fs::path& rel, int flags, mode_t mode) {
  const int dir = open_root(roots, root);
  return dir < 0 ? -1 : after_closing(dir, open_below(dir, rel, flags, mode));
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
    fs::path rel;
    if (const Root* best = innermost(*roots, p, nullptr, rel)) return open_beneath(*roots, *best, rel, flags, mode);
  }
  return ::open(path.c_str(), flags, mode);
}

std::string proc_fd_path(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

int reopen_fd(int fd, int flags) { return ::open(proc_fd_path(fd).c_str(), flags); }

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
  if ((err == ENODEV || err == ENXIO) && roots_now())
    return invalid_argument(what + " '" + path + "': it is not a regular file or directory (a FIFO, device or socket)");
  return errno_status(what, path, err);
}

Result<OwnedFd> open_regular_file(const std::string& what, const std::string& path) {
  MT_ASSIGN_OR_RETURN(OwnedFd fd, open_confined_or_status(what, path, O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno_status("cannot stat", path, errno);
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a file";
    return invalid_argument(what + " '" + path + "': it is " + kind + ", not a regular file");
  }
  if (::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK) != 0)
    return errno_status("cannot open", path, errno);
  return fd;
}

}  // namespace mt

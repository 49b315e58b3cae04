#include "engine/base/dir_fd.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "engine/base/confined_open.h"

namespace mt {

Status errno_status(const std::string& what, const std::string& path, int err) {
  const std::string m = what + " '" + path + "': " + std::strerror(err);
  if (err == ENOSPC || err == EFBIG || err == EDQUOT) return resource_exhausted(m);
  if (err == ENAMETOOLONG) return invalid_argument(m);  // the caller's name, not the disk
  return data_loss(m);
}

namespace {

constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;

// The directory `name` inside `dir`, never through a symlink: openat2 confines the lookup to
// `dir` and refuses symlinks; kernels before 5.6 (ENOSYS) or sandboxes that filter the call
// (EPERM) get openat with O_NOFOLLOW, the same for one component.
int open_component(int dir, const std::string& name) {
#ifdef SYS_openat2
  open_how how{};
  how.flags = kDirFlags;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  const long fd = ::syscall(SYS_openat2, dir, name.c_str(), &how, sizeof how);
  if (fd >= 0 || (errno != ENOSYS && errno != EPERM)) return int(fd);
#endif
  return ::openat(dir, name.c_str(), kDirFlags | O_NOFOLLOW);
}

// Why `name` in `dir` (AT_FDCWD: a path) could not be opened as a directory (errno `err`). ELOOP
// is the refusal of a symlink (O_NOFOLLOW, RESOLVE_NO_SYMLINKS); with O_DIRECTORY a symlink may
// answer ENOTDIR instead, told apart by a look at the entry.
Status component_error(int dir, const std::string& name, const std::string& shown, int err) {
  struct stat st {};
  const bool looked = ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
  if (err == ELOOP || (err == ENOTDIR && looked && S_ISLNK(st.st_mode)))
    return invalid_argument("'" + shown + "' is a symlink; it is not followed");
  if (err == ENOTDIR) return failed_precondition("'" + shown + "' is not a directory");
  if (err == ENOENT) return not_found("'" + shown + "' does not exist");
  return errno_status("cannot open directory", shown, err);
}

}  // namespace

DirFd::~DirFd() {
  if (fd_ >= 0) ::close(fd_);
}

DirFd::DirFd(DirFd&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }

DirFd& DirFd::operator=(DirFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

Result<DirFd> DirFd::open(const std::string& path, bool create) {
  if (create) {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec && ec != std::errc::file_exists) return errno_status("cannot create", path, ec.value());
  }
  const int fd = open_confined(path, kDirFlags);
  if (fd < 0) {
    const int err = errno;
    if (err == EXDEV) return invalid_argument("'" + path + "' leads outside the allowed roots (through a symlink)");
    if (err == ENOTDIR) return failed_precondition("'" + path + "' is not a directory");
    if (err == ENOENT) return not_found("'" + path + "' does not exist");
    return errno_status("cannot open directory", path, err);
  }
  return DirFd(fd, path);
}

Result<DirFd> DirFd::open_beneath(const std::string& root, const std::string& rel, bool create) {
  if (!rel.empty() && rel[0] == '/') return invalid_argument("'" + rel + "' is not a relative path");
  const int root_fd = ::open(root.c_str(), kDirFlags | O_NOFOLLOW);
  if (root_fd < 0) return component_error(AT_FDCWD, root, root, errno).with_context("the root");
  DirFd cur(root_fd, root);
  for (const auto& part : std::filesystem::path(rel)) {
    const std::string name = part.string();
    if (name.empty() || name == ".") continue;
    if (name == "..") return invalid_argument("'" + rel + "' has a '..' component");
    const std::string shown = cur.file(name);
    if (create && ::mkdirat(cur.fd(), name.c_str(), 0755) != 0 && errno != EEXIST)
      return errno_status("cannot create", shown, errno);
    const int fd = open_component(cur.fd(), name);
    if (fd < 0) return component_error(cur.fd(), name, shown, errno);
    cur = DirFd(fd, shown);
  }
  return cur;
}

std::string DirFd::file(const std::string& name) const { return (std::filesystem::path(path_) / name).string(); }

Result<std::vector<std::string>> DirFd::list() const {
  const int dup = ::openat(fd_, ".", kDirFlags);  // a descriptor of its own for the stream
  DIR* d = dup < 0 ? nullptr : ::fdopendir(dup);
  if (!d) {
    const int err = errno;
    if (dup >= 0) ::close(dup);
    return errno_status("cannot list", path_, err);
  }
  std::vector<std::string> out;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

bool DirFd::has(const std::string& name) const {
  struct stat st {};
  return ::fstatat(fd_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

Status DirFd::remove(const std::string& name) const {
  if (::unlinkat(fd_, name.c_str(), 0) != 0 && errno != ENOENT) return errno_status("cannot remove", file(name), errno);
  return Status::Ok();
}

uint64_t DirFd::file_bytes() const {
  uint64_t n = 0;
  auto names = list();
  if (!names.ok()) return 0;
  for (const auto& name : *names) {
    struct stat st {};
    if (::fstatat(fd_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) n += uint64_t(st.st_size);
  }
  return n;
}

Status DirFd::sync() const {
  return ::fsync(fd_) != 0 ? errno_status("error syncing directory", path_, errno) : Status::Ok();
}

}  // namespace mt

#include "engine/base/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace mt {

namespace {

std::string holder_pid(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string pid(buf, n > 0 ? size_t(n) : 0);
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid.empty() ? "unknown" : pid;
}

}  // namespace

Result<std::unique_ptr<FileLock>> FileLock::acquire(const std::string& path, const std::string& in_use,
                                                    const std::string& remedy) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) {
    const int err = errno;
    const std::string m = "cannot open the lock '" + path + "': " + std::strerror(err);
    return err == EACCES || err == EROFS || err == ENOTDIR || err == ENOENT ? failed_precondition(m) : internal_error(m);
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string pid = holder_pid(fd);
    ::close(fd);
    if (err == EWOULDBLOCK)
      return failed_precondition(in_use + " (pid " + pid + ", holding '" + path + "'); " + remedy);
    return internal_error("cannot lock '" + path + "': " + std::strerror(err));
  }
  const std::string text = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) != ssize_t(text.size())) {
    ::close(fd);
    return internal_error("cannot write the pid into '" + path + "': " + std::strerror(errno));
  }
  return std::unique_ptr<FileLock>(new FileLock(fd));
}

FileLock::~FileLock() { ::close(fd_); }  // releases the flock

}  // namespace mt

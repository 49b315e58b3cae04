#include "server/state_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace mt::server {

namespace {

std::string holder_pid(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string pid(buf, n > 0 ? size_t(n) : 0);
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid.empty() ? "unknown" : pid;
}

}  // namespace

Result<std::unique_ptr<StateLock>> StateLock::acquire(const std::string& state_dir) {
  const std::string path = state_dir + "/megatraind.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) return internal_error("cannot open the state lock '" + path + "': " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string pid = holder_pid(fd);
    ::close(fd);
    if (err == EWOULDBLOCK)
      return failed_precondition("the state directory '" + state_dir + "' is in use by another megatraind (pid " +
                                 pid + ", holding '" + path + "'); stop it or choose another --state_dir");
    return internal_error("cannot lock '" + path + "': " + std::strerror(err));
  }
  const std::string text = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) != ssize_t(text.size())) {
    ::close(fd);
    return internal_error("cannot write the pid into '" + path + "': " + std::strerror(errno));
  }
  return std::unique_ptr<StateLock>(new StateLock(fd));
}

StateLock::~StateLock() { ::close(fd_); }  // releases the flock

}  // namespace mt::server

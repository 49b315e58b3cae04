#include "engine/base/direct_file.h"

#include <fcntl.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "engine/base/confined_open.h"
#include "engine/base/dir_fd.h"

namespace mt {

namespace {
std::atomic<int> g_open_error{0};
std::atomic<bool> g_tmpfs{false};

constexpr long kTmpfsMagic = 0x01021994, kRamfsMagic = 0x858458f6;

// An unnamed file in `dir` (O_TMPFILE), or a uniquely named one unlinked at once.
int open_unnamed(const std::string& dir, int flags) {
  if (const int e = g_open_error.load(); e != 0 && (flags & O_DIRECT)) return errno = e, -1;
  const int fd = open_confined(dir, O_TMPFILE | flags, 0600);
  if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR)) return fd;
  static std::atomic<long> serial{0};
  const std::string path = dir + "/.megatrain-scratch." + std::to_string(::getpid()) + "." + std::to_string(serial++);
  const int named = open_confined(path, O_CREAT | O_EXCL | flags, 0600);
  if (named >= 0) ::unlink(path.c_str());
  return named;
}
}  // namespace

void DirectFile::set_faults_for_testing(int error, bool tmpfs) {
  g_open_error = error;
  g_tmpfs = tmpfs;
}

Result<DirectFile> DirectFile::create_scratch(const std::string& dir, uint64_t bytes) {
  struct statfs sf {};
  if (::statfs(dir.c_str(), &sf) != 0) return errno_status("cannot use the directory", dir, errno);
  if (g_tmpfs || long(sf.f_type) == kTmpfsMagic || long(sf.f_type) == kRamfsMagic)
    return failed_precondition("'" + dir + "' is on tmpfs or ramfs, which is host memory: put the NVMe tier on a "
                               "local drive's filesystem (ext4, xfs)");
  // Checked before fallocate, which on a drive without the room fills it before it fails.
  if (const uint64_t free = uint64_t(sf.f_bavail) * uint64_t(sf.f_bsize); bytes > free)
    return resource_exhausted("'" + dir + "': no space to reserve " + std::to_string(bytes) + " bytes for the NVMe tier (" +
                              std::to_string(free) + " free)");
  DirectFile f;
  f.path_ = dir;
  f.fd_ = open_unnamed(dir, O_RDWR | O_CLOEXEC | O_DIRECT);
  if (f.fd_ < 0 && errno == EINVAL)
    return failed_precondition("'" + dir + "' is on a filesystem without direct I/O (O_DIRECT): put the NVMe tier "
                               "on a local drive's filesystem (ext4, xfs)");
  if (f.fd_ < 0) return errno_status("cannot create a scratch file in", dir, errno);
  if (bytes == 0) return f;
  const int rc = ::posix_fallocate(f.fd_, 0, off_t(bytes));  // returns the error, not -1
  if (rc == ENOSPC || rc == EFBIG)
    return resource_exhausted("'" + dir + "': no space to reserve " + std::to_string(bytes) +
                              " bytes for the NVMe tier");
  if (rc != 0) return errno_status("cannot reserve " + std::to_string(bytes) + " bytes in", dir, rc);
  return f;
}

DirectFile& DirectFile::operator=(DirectFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
  }
  return *this;
}

DirectFile::~DirectFile() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {
template <typename Op, typename Buf>
Status transfer(int fd, Buf buf, size_t n, uint64_t offset, const std::string& path, const char* what, Op op) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = op(fd, buf + done, n - done, off_t(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      return errno_status(std::string("error ") + what + " " + std::to_string(n) + " bytes at offset " +
                              std::to_string(offset) + " of",
                          path, r < 0 ? errno : EIO);
    done += size_t(r);
  }
  return Status::Ok();
}
}  // namespace

Status DirectFile::read(void* buf, size_t n, uint64_t offset) const {
  return transfer(fd_, static_cast<char*>(buf), n, offset, path_, "reading", ::pread);
}

Status DirectFile::write(const void* buf, size_t n, uint64_t offset) const {
  return transfer(fd_, static_cast<const char*>(buf), n, offset, path_, "writing", ::pwrite);
}

Result<AlignedBuffer> AlignedBuffer::allocate(size_t bytes) {
  AlignedBuffer b;
  b.bytes_ = direct_round_up(bytes);
  b.p_ = static_cast<char*>(std::aligned_alloc(kDirectAlign, b.bytes_ ? b.bytes_ : kDirectAlign));
  if (!b.p_) return resource_exhausted("cannot allocate " + std::to_string(bytes) + " bytes of aligned memory");
  return b;
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    std::free(p_);
    p_ = std::exchange(o.p_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

AlignedBuffer::~AlignedBuffer() { std::free(p_); }

}  // namespace mt

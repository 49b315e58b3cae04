// Parallel aligned file I/O (direct_io.h): the options and the process's notes about them, the
// worker threads with their aligned buffers, and the writer. The reader is in direct_read.cc.
#include "engine/io/direct_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "engine/base/confined_open.h"
#include "engine/io/direct_io_internal.h"

namespace mt {

// ---- options, counters, the fallback notice, injected faults -----------------------------------

namespace {

std::mutex g_mu;
bool g_options_set = false;
FileIoOptions g_options;
IoFaultsForTesting g_faults;
bool g_noticed = false;     // a fallback was printed (once per process)
std::string g_notice;       // and waits to be taken
std::atomic<uint64_t> g_direct_files{0}, g_buffered_files{0};

FileIoOptions options_from_env() {
  FileIoOptions o;
  if (const char* m = std::getenv("MEGATRAIN_CHECKPOINT_IO"); m && *m) {
    if (auto mode = parse_file_io_mode(m); mode.ok()) o.mode = *mode;
    else std::fprintf(stderr, "megatrain: warning: MEGATRAIN_CHECKPOINT_IO: %s; using direct\n", mode.status().message().c_str());
  }
  if (const char* t = std::getenv("MEGATRAIN_CHECKPOINT_THREADS"); t && *t) {
    const int n = std::atoi(t);
    if (n >= 1 && n <= 256) o.threads = n;
    else std::fprintf(stderr, "megatrain: warning: MEGATRAIN_CHECKPOINT_THREADS='%s' is not 1..256; using %d\n", t, o.threads);
  }
  return o;
}

}  // namespace

const char* file_io_mode_name(FileIoMode m) {
  switch (m) {
    case FileIoMode::kDirect: return "direct";
    case FileIoMode::kBuffered: return "buffered";
    case FileIoMode::kStream: return "stream";
  }
  return "?";
}

Result<FileIoMode> parse_file_io_mode(const std::string& name) {
  for (FileIoMode m : {FileIoMode::kDirect, FileIoMode::kBuffered, FileIoMode::kStream})
    if (name == file_io_mode_name(m)) return m;
  return invalid_argument("file I/O mode '" + name + "' is not direct, buffered or stream");
}

FileIoOptions checkpoint_io_options() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_options_set) g_options = options_from_env(), g_options_set = true;
  return g_options;
}

void set_checkpoint_io_options(const FileIoOptions& o) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_options = o;
  g_options_set = true;
}

FileIoCounters file_io_counters() { return {g_direct_files.load(), g_buffered_files.load()}; }

std::string take_direct_io_notice() {
  std::lock_guard<std::mutex> lock(g_mu);
  return std::exchange(g_notice, std::string());
}

void set_io_faults_for_testing(IoFaultsForTesting f) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_faults = std::move(f);
  g_noticed = false;  // the next fallback is noted again
  g_notice.clear();
}

int injected_write_error(const std::string& path, uint64_t offset) {
  std::function<int(const std::string&, uint64_t)> f;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    f = g_faults.write_error;
  }
  return f ? f(path, offset) : 0;
}

namespace io_detail {

void note_fallback(const std::string& path, const std::string& why) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_noticed) return;
  g_noticed = true;
  g_notice = "O_DIRECT is refused for '" + path + "' (" + why + "); checkpoint files there go through the page cache";
  std::fprintf(stderr, "megatrain: warning: %s\n", g_notice.c_str());
}

void count_file(bool direct) { ++(direct ? g_direct_files : g_buffered_files); }

namespace {
bool direct_refused() {
  int refuse = 0;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    refuse = g_faults.refuse_direct;
  }
  if (refuse != 0) errno = refuse;
  return refuse != 0;
}
}  // namespace

int open_direct(int dir, const std::string& name, int flags) {
  if (direct_refused()) return -1;
  return ::openat(dir, name.c_str(), flags | O_DIRECT | O_CLOEXEC | O_NOFOLLOW);
}

int reopen_direct(int fd, int flags) {
  if (direct_refused()) return -1;
  return reopen_fd(fd, flags | O_DIRECT | O_CLOEXEC);
}

uint64_t align_up(uint64_t n) { return (n + kDirectIoAlign - 1) / kDirectIoAlign * kDirectIoAlign; }

// A buffer of 2 MiB or more is made of transparent huge pages where the kernel has them: a
// direct request is cut at the device's segment limit (virtio-blk: 254 segments), and scattered
// 4 KiB pages make ~1 MiB requests where 2 MiB pages make them as large as the device takes
// (measured: 3x the bandwidth on a VM's disk; docs/PERF.md). Such buffers are kept for the next
// file (up to kPooledBytes), so a checkpoint after the first neither faults nor compacts memory.
constexpr size_t kHuge = size_t(2) << 20, kPooledBytes = size_t(256) << 20;
std::mutex g_pool_mu;
struct Pool {  // free buffers and their sizes; freed at exit
  std::vector<std::pair<char*, size_t>> free;
  ~Pool() {
    for (auto& [p, n] : free) std::free(p);
  }
} g_pool;
size_t g_pooled = 0;

AlignedBuffer::AlignedBuffer(size_t n) {
  huge_ = n >= kHuge;
  bytes_ = huge_ ? (n + kHuge - 1) / kHuge * kHuge : align_up(n);
  if (huge_) {
    std::lock_guard<std::mutex> lock(g_pool_mu);
    for (auto it = g_pool.free.begin(); it != g_pool.free.end(); ++it)
      if (it->second == bytes_) {
        p = it->first;
        g_pooled -= bytes_;
        g_pool.free.erase(it);
        return;
      }
  }
  p = static_cast<char*>(std::aligned_alloc(huge_ ? kHuge : kDirectIoAlign, bytes_));
  if (p && huge_) (void)::madvise(p, bytes_, MADV_HUGEPAGE);  // before the first touch; a hint only
}

AlignedBuffer::~AlignedBuffer() {
  if (p && huge_) {
    std::lock_guard<std::mutex> lock(g_pool_mu);
    if (g_pooled + bytes_ <= kPooledBytes) {
      g_pool.free.emplace_back(p, bytes_);
      g_pooled += bytes_;
      return;
    }
  }
  std::free(p);
}

Status run_workers(int threads, size_t n, size_t buffer_bytes, const std::function<Status(size_t, char*)>& work) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  Status first;
  auto fail = [&](Status s) {
    std::lock_guard<std::mutex> lock(mu);
    if (first.ok()) first = std::move(s);
    failed = true;
  };
  auto body = [&] {
    AlignedBuffer buf(buffer_bytes);
    if (!buf.p) return fail(resource_exhausted("cannot allocate an I/O buffer of " + std::to_string(buffer_bytes) + " bytes"));
    for (size_t i; !failed && (i = next++) < n;)
      if (Status s = work(i, buf.p); !s.ok()) fail(std::move(s));
  };
  const size_t t = std::min<size_t>(size_t(std::max(threads, 1)), n);
  std::vector<std::thread> pool;
  for (size_t k = 1; k < t; ++k) pool.emplace_back(body);
  if (t > 0) body();
  for (auto& th : pool) th.join();
  return first;
}

}  // namespace io_detail

// ---- the writer --------------------------------------------------------------------------------

namespace {

using namespace io_detail;

// pwrite of all n bytes at `off`; 0 or the errno of the call that failed (injected ones too).
int pwrite_all(int fd, const char* p, size_t n, uint64_t off, const std::string& path) {
  while (n > 0) {
    if (const int e = injected_write_error(path, off)) return e;
    const ssize_t w = ::pwrite(fd, p, std::min(n, size_t(1) << 30), off_t(off));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? errno : EIO;
    p += w, n -= size_t(w), off += uint64_t(w);
  }
  return 0;
}

// One output file on two descriptors: fd_ through the page cache (created, truncated and
// preallocated; the tail, and any piece O_DIRECT refuses) and direct_ with O_DIRECT (-1: none).
// Closes both and removes the file unless committed.
class ParallelOut {
 public:
  ParallelOut(const DirFd& dir, std::string name) : dir_(dir), name_(std::move(name)), path_(dir.file(name_)) {}
  ~ParallelOut() {
    if (direct_ >= 0) ::close(direct_);
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlinkat(dir_.fd(), name_.c_str(), 0);
  }

  Status create(uint64_t size) {
    fd_ = ::openat(dir_.fd(), name_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd_ < 0) return errno_status("cannot create", path_, errno);
    if (size == 0 || ::fallocate(fd_, 0, 0, off_t(size)) == 0) return Status::Ok();
    const int err = errno;  // a file system without fallocate: the size alone, so no write extends the file
    if (err != EOPNOTSUPP && err != ENOSYS && err != EINVAL) return errno_status("cannot allocate", path_, err);
    return ::ftruncate(fd_, off_t(size)) == 0 ? Status::Ok() : errno_status("cannot size", path_, errno);
  }

  void open_direct() {
    direct_ = io_detail::open_direct(dir_.fd(), name_, O_WRONLY);
    opened_direct_ = direct_ >= 0;
    if (!opened_direct_) refused(std::string("open: ") + std::strerror(errno));
  }
  // Every piece went through O_DIRECT (the tail aside).
  bool direct() const { return opened_direct_ && fallback().empty(); }
  bool has_direct() const { return direct_ >= 0; }
  std::string fallback() const {
    std::lock_guard<std::mutex> lock(mu_);
    return fallback_;
  }

  // n bytes at off: with O_DIRECT where open (whole blocks), through the page cache where refused.
  Status write(const char* p, size_t n, uint64_t off) {
    if (direct_ >= 0) {
      const int e = pwrite_all(direct_, p, n, off, path_);
      if (e != EINVAL) return e == 0 ? Status::Ok() : errno_status("error writing", path_, e);
      refused("a write at byte " + std::to_string(off) + ": " + std::strerror(e));
    }
    return write_buffered(p, n, off);
  }
  Status write_buffered(const char* p, size_t n, uint64_t off) {
    const int e = pwrite_all(fd_, p, n, off, path_);
    return e == 0 ? Status::Ok() : errno_status("error writing", path_, e);
  }

  Status commit() {
    if (direct_ >= 0) {
      const int rc = ::close(direct_);
      direct_ = -1;
      if (rc != 0) return errno_status("error closing", path_, errno);
    }
    if (::fsync(fd_) != 0) return errno_status("error syncing", path_, errno);  // the inode: both descriptors' bytes
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) return errno_status("error closing", path_, errno);
    committed_ = true;
    return Status::Ok();
  }

 private:
  void refused(const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!fallback_.empty()) return;
      fallback_ = why;
    }
    note_fallback(path_, why);
  }

  const DirFd& dir_;
  std::string name_, path_;
  int fd_ = -1, direct_ = -1;
  bool opened_direct_ = false, committed_ = false;
  mutable std::mutex mu_;
  std::string fallback_;
};

}  // namespace

Status write_file_parallel(const DirFd& dir, const std::string& name, uint64_t size, const FillBytes& fill,
                           const FileIoOptions& o, FileIoReport* report) {
  ParallelOut out(dir, name);
  MT_RETURN_IF_ERROR(out.create(size));
  if (o.mode == FileIoMode::kDirect) out.open_direct();
  const uint64_t chunk = align_up(std::max<size_t>(o.chunk_bytes, 1));
  // O_DIRECT writes whole blocks: the bytes past the last one go through the page cache after.
  const uint64_t body = out.has_direct() ? size / kDirectIoAlign * kDirectIoAlign : size;
  const size_t pieces = size_t((body + chunk - 1) / chunk);
  MT_RETURN_IF_ERROR(run_workers(o.threads, pieces, size_t(chunk), [&](size_t i, char* buf) {
    const uint64_t off = uint64_t(i) * chunk, n = std::min(chunk, body - off);
    fill(off, size_t(n), buf);
    return out.write(buf, size_t(n), off);
  }));
  if (body < size) {
    AlignedBuffer tail(kDirectIoAlign);
    if (!tail.p) return resource_exhausted("cannot allocate an I/O buffer");
    fill(body, size_t(size - body), tail.p);
    MT_RETURN_IF_ERROR(out.write_buffered(tail.p, size_t(size - body), body));
  }
  MT_RETURN_IF_ERROR(out.commit());
  count_file(out.direct());
  if (report) *report = {out.direct(), int(std::min<size_t>(size_t(std::max(o.threads, 1)), std::max<size_t>(pieces, 1))),
                         o.mode == FileIoMode::kDirect ? out.fallback() : ""};
  return Status::Ok();
}

}  // namespace mt

#include "server/push_spool.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace mt::server {

namespace {

constexpr uint32_t kMagic = 0x5053544d;  // "MTSP"
constexpr size_t kHeader = 16;

uint32_t crc(const void* p, size_t n) {
  return uint32_t(crc32(0L, static_cast<const Bytef*>(p), uInt(n)));
}

std::string errno_text(const std::string& what, const std::string& path) {
  return what + " '" + path + "': " + std::strerror(errno);
}

bool pread_all(int fd, void* buf, size_t n, uint64_t off) {
  auto* p = static_cast<char*>(buf);
  while (n) {
    ssize_t r = ::pread(fd, p, n, off_t(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r, n -= size_t(r), off += uint64_t(r);
  }
  return true;
}

bool write_all(int fd, const void* buf, size_t n) {
  auto* p = static_cast<const char*>(buf);
  while (n) {
    ssize_t r = ::write(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r, n -= size_t(r);
  }
  return true;
}

}  // namespace

uint64_t token_checksum(uint32_t token) {
  uint64_t z = uint64_t(token) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Result<std::shared_ptr<PushSpool>> PushSpool::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) return internal_error(errno_text("cannot open spool", path));
  struct stat st {};
  ::fstat(fd, &st);
  const uint64_t size = uint64_t(st.st_size);
  // Recovery scan: keep every complete record whose checksums hold; drop the rest.
  uint64_t off = 0, tokens = 0;
  std::vector<uint32_t> payload;
  while (off + kHeader <= size) {
    uint32_t h[4];
    if (!pread_all(fd, h, kHeader, off) || h[0] != kMagic || h[3] != crc(h, 12)) break;
    const uint64_t bytes = uint64_t(h[1]) * 4;
    if (off + kHeader + bytes > size) break;
    payload.resize(h[1]);
    if (!pread_all(fd, payload.data(), bytes, off + kHeader) || crc(payload.data(), bytes) != h[2]) break;
    off += kHeader + bytes;
    tokens += h[1];
  }
  if (off != size && (::ftruncate(fd, off_t(off)) != 0 || ::fdatasync(fd) != 0)) {
    ::close(fd);
    return internal_error(errno_text("cannot truncate the torn tail of spool", path));
  }
  if (::lseek(fd, off_t(off), SEEK_SET) < 0) {
    ::close(fd);
    return internal_error(errno_text("cannot seek spool", path));
  }
  return std::shared_ptr<PushSpool>(new PushSpool(path, fd, tokens));
}

PushSpool::~PushSpool() {
  if (fd_ >= 0) ::close(fd_);
}

Status PushSpool::append(const uint32_t* tokens, size_t n) {
  if (n == 0) return Status::Ok();
  if (n > 0xffffffffu) return invalid_argument("chunk too large");
  uint32_t h[4] = {kMagic, uint32_t(n), crc(tokens, n * 4), 0};
  h[3] = crc(h, 12);
  std::lock_guard<std::mutex> lock(mu_);
  const off_t start = ::lseek(fd_, 0, SEEK_CUR);
  if (!write_all(fd_, h, kHeader) || !write_all(fd_, tokens, n * 4) || ::fdatasync(fd_) != 0) {
    const std::string msg = errno_text("cannot spool pushed data to", path_);
    // Leave no partial record behind: later appends must follow the last good one.
    if (start >= 0 && ::ftruncate(fd_, start) == 0) ::lseek(fd_, start, SEEK_SET);
    return resource_exhausted(msg);
  }
  tokens_ += n;
  cv_.notify_all();
  return Status::Ok();
}

bool PushSpool::wait_for(uint64_t n, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return stopped_.load() || tokens_.load() >= n; });
  return !stopped_.load() && tokens_.load() >= n;
}

void PushSpool::stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopped_ = true;
  cv_.notify_all();
}

namespace {

class PushSource final : public DataSource {
 public:
  PushSource(std::shared_ptr<PushSpool> spool, int vocab, std::shared_ptr<PushProgress> progress, int fd)
      : spool_(std::move(spool)), vocab_(vocab), progress_(std::move(progress)), fd_(fd) {}
  ~PushSource() override { ::close(fd_); }

  Status next_batch(int num_seqs, int seq_len, Batch& out) override {
    const uint64_t need = uint64_t(num_seqs) * uint64_t(seq_len + 1);
    const auto since = std::chrono::steady_clock::now();
    while (!spool_->wait_for(cursor_ + need, std::chrono::milliseconds(100))) {
      if (spool_->stopped()) {
        progress_->waiting = false;
        return cancelled("push data: stopped while waiting for data");
      }
      progress_->waiting = true;
      if (progress_->interrupt.exchange(false) || std::chrono::steady_clock::now() - since >= kStarvedCheck)
        return Status(StatusCode::kUnavailable, "push data: waiting for " + std::to_string(need) + " tokens");
    }
    progress_->waiting = false;
    progress_->interrupt = false;  // a checkpoint-now that raced the data is served at the step boundary
    buf_.resize(need);
    MT_RETURN_IF_ERROR(read(buf_.data(), need));
    out.num_seqs = num_seqs;
    out.seq_len = seq_len;
    out.inputs.resize(size_t(num_seqs) * seq_len);
    out.targets.resize(size_t(num_seqs) * seq_len);
    uint64_t sum = 0;
    for (int g = 0; g < num_seqs; ++g) {
      const uint32_t* w = buf_.data() + size_t(g) * (seq_len + 1);
      for (int t = 0; t < seq_len; ++t) {
        out.inputs[size_t(g) * seq_len + t] = int32_t(w[t]);
        out.targets[size_t(g) * seq_len + t] = int32_t(w[t + 1]);
      }
    }
    for (uint32_t tok : buf_) sum += token_checksum(tok);
    MT_RETURN_IF_ERROR(validate_batch(out, vocab_));
    progress_->consumed += need;
    progress_->checksum += sum;
    return Status::Ok();
  }

  uint64_t cursor() const override { return cursor_; }

  Status seek(uint64_t target) override {
    next_off_ = 0, payload_off_ = 0, rec_len_ = 0, rec_pos_ = 0, cursor_ = 0;
    if (target > spool_->tokens())
      return data_loss("push data: checkpoint cursor " + std::to_string(target) + " is past the spool's " +
                       std::to_string(spool_->tokens()) + " tokens ('" + spool_->path() + "')");
    uint64_t sum = 0;
    std::vector<uint32_t> chunk;
    while (cursor_ < target) {
      const uint64_t n = std::min<uint64_t>(target - cursor_, 1 << 16);
      chunk.resize(n);
      MT_RETURN_IF_ERROR(read(chunk.data(), n));
      for (uint32_t tok : chunk) sum += token_checksum(tok);
    }
    progress_->consumed = cursor_;
    progress_->checksum = sum;
    return Status::Ok();
  }

  std::string describe() const override { return "push spool " + spool_->path(); }

 private:
  Status read(uint32_t* out, uint64_t n) {
    while (n) {
      if (rec_pos_ == rec_len_) {
        uint32_t h[4];
        if (!pread_all(fd_, h, kHeader, next_off_) || h[0] != kMagic)
          return data_loss("push data: bad record header at byte " + std::to_string(next_off_) + " of '" +
                           spool_->path() + "'");
        payload_off_ = next_off_ + kHeader;
        rec_len_ = h[1];
        rec_pos_ = 0;
        next_off_ = payload_off_ + uint64_t(h[1]) * 4;
        continue;
      }
      const uint64_t take = std::min<uint64_t>(n, rec_len_ - rec_pos_);
      if (!pread_all(fd_, out, take * 4, payload_off_ + rec_pos_ * 4))
        return data_loss("push data: short read from '" + spool_->path() + "'");
      out += take, n -= take, rec_pos_ += take, cursor_ += take;
    }
    return Status::Ok();
  }

  std::shared_ptr<PushSpool> spool_;
  int vocab_;
  std::shared_ptr<PushProgress> progress_;
  int fd_;
  uint64_t cursor_ = 0, next_off_ = 0, payload_off_ = 0, rec_len_ = 0, rec_pos_ = 0;
  std::vector<uint32_t> buf_;
};

}  // namespace

Result<std::unique_ptr<DataSource>> make_push_source(std::shared_ptr<PushSpool> spool, int vocab,
                                                     std::shared_ptr<PushProgress> progress) {
  int fd = ::open(spool->path().c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return internal_error(errno_text("cannot open spool", spool->path()));
  return std::unique_ptr<DataSource>(new PushSource(std::move(spool), vocab, std::move(progress), fd));
}

}  // namespace mt::server

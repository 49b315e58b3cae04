#include "server/push_spool.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <spdlog/spdlog.h>
#include <zlib.h>

#include <algorithm>
#include <array>

#include <cerrno>
#include <cstring>
#include <vector>

#include "engine/model/init.h"
#include "engine/base/hash.h"

namespace mt::server {

namespace {

constexpr uint32_t kMagicV1 = 0x5053544d;  // "MTSP": 16-byte header, no push position
constexpr uint32_t kMagicV2 = 0x3253544d;  // "MTS2": 32-byte header with push key and offset
constexpr size_t kHeaderV1 = 16, kHeaderV2 = 32;

uint32_t crc(const void* p, size_t n, uint32_t seed = 0) {
  return uint32_t(crc32(seed, static_cast<const Bytef*>(p), uInt(n)));
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
    if (r == 0) errno = EIO;
    if (r <= 0) return false;
    p += r, n -= size_t(r);
  }
  return true;
}

// Why an append to the spool at `path` failed (errno `err`): a full disk or quota named as such,
// with what is left on that filesystem, as a failed checkpoint names it.
Status spool_write_failure(const std::string& path, int err) {
  std::string msg = "cannot spool pushed data to '" + path + "': ";
  if (err != ENOSPC && err != EDQUOT) return data_loss(msg + std::strerror(err));
  struct statvfs fs {};
  msg += err == ENOSPC ? "no space left on the state directory's filesystem" : "the disk quota of the state directory is used up";
  if (::statvfs(path.c_str(), &fs) == 0)
    msg += " (" + std::to_string(uint64_t(fs.f_bavail) * fs.f_frsize) + " of " +
           std::to_string(uint64_t(fs.f_blocks) * fs.f_frsize) + " bytes free)";
  return resource_exhausted(msg + "; the chunk was not spooled, earlier ones are kept");
}

struct Header {
  uint32_t count = 0, payload_crc = 0;
  uint64_t key = 0, offset = 0;
  size_t size = 0;  // of the header itself
  uint64_t payload_bytes() const { return uint64_t(count) * 4; }
  uint64_t record_bytes() const { return size + payload_bytes(); }
};

std::array<uint32_t, 8> encode_v2(const Header& h) {
  std::array<uint32_t, 8> w = {kMagicV2, h.count, h.payload_crc, 0, uint32_t(h.key), uint32_t(h.key >> 32),
                               uint32_t(h.offset), uint32_t(h.offset >> 32)};
  w[3] = crc(w.data(), kHeaderV2);
  return w;
}

enum class HeaderRead { kOk, kShort, kBad };

// The header at `off`, with `avail` bytes of file from there on.
HeaderRead read_header(int fd, uint64_t off, uint64_t avail, Header& h) {
  std::array<uint32_t, 8> w{};
  if (avail < kHeaderV1) return HeaderRead::kShort;
  if (!pread_all(fd, w.data(), kHeaderV1, off)) return HeaderRead::kShort;
  h.count = w[1], h.payload_crc = w[2], h.key = 0, h.offset = 0;
  if (w[0] == kMagicV1) {
    h.size = kHeaderV1;
    return w[3] == crc(w.data(), 12) ? HeaderRead::kOk : HeaderRead::kBad;
  }
  if (w[0] != kMagicV2) return HeaderRead::kBad;
  if (avail < kHeaderV2) return HeaderRead::kShort;
  if (!pread_all(fd, w.data() + 4, kHeaderV2 - kHeaderV1, off + kHeaderV1)) return HeaderRead::kShort;
  h.size = kHeaderV2;
  h.key = uint64_t(w[4]) | uint64_t(w[5]) << 32;
  h.offset = uint64_t(w[6]) | uint64_t(w[7]) << 32;
  const uint32_t stored = w[3];
  w[3] = 0;
  return stored == crc(w.data(), kHeaderV2) ? HeaderRead::kOk : HeaderRead::kBad;
}

// CRC-32 of `bytes` at `off`, read in bounded pieces (a record may be large); false on a short read.
bool payload_crc(int fd, uint64_t off, uint64_t bytes, uint32_t& out) {
  std::vector<char> buf(std::min<uint64_t>(bytes, 1 << 20));
  uint32_t c = 0;
  for (uint64_t done = 0; done < bytes;) {
    const size_t n = size_t(std::min<uint64_t>(buf.size(), bytes - done));
    if (!pread_all(fd, buf.data(), n, off + done)) return false;
    c = crc(buf.data(), n, c);
    done += n;
  }
  out = c;
  return true;
}

bool zeros_from(int fd, uint64_t off, uint64_t size) {
  std::vector<char> buf(1 << 16);
  for (; off < size;) {
    const size_t n = size_t(std::min<uint64_t>(buf.size(), size - off));
    if (!pread_all(fd, buf.data(), n, off)) return false;
    if (std::any_of(buf.begin(), buf.begin() + ptrdiff_t(n), [](char c) { return c != 0; })) return false;
    off += n;
  }
  return true;
}

// Is there an intact record at `off` (header and payload checksums hold, within the file)?
bool intact_at(int fd, uint64_t off, uint64_t size) {
  Header h;
  uint32_t c = 0;
  return read_header(fd, off, size - off, h) == HeaderRead::kOk && h.record_bytes() <= size - off &&
         payload_crc(fd, off + h.size, h.payload_bytes(), c) && c == h.payload_crc;
}

// The first intact record after `off` (records are 4-byte aligned), or -1: for the report.
int64_t next_intact(int fd, uint64_t off, uint64_t size) {
  std::vector<uint32_t> buf(1 << 14);
  for (uint64_t base = off + 4; base + kHeaderV1 <= size; base += buf.size() * 4) {
    const size_t n = size_t(std::min<uint64_t>(buf.size(), (size - base) / 4));
    if (!pread_all(fd, buf.data(), n * 4, base)) return -1;
    for (size_t i = 0; i < n; ++i)
      if ((buf[i] == kMagicV1 || buf[i] == kMagicV2) && intact_at(fd, base + i * 4, size)) return int64_t(base + i * 4);
  }
  return -1;
}

// What the recovery scan found.
struct Scan {
  uint64_t end = 0, tokens = 0, records = 0;  // of the intact prefix
  std::map<uint64_t, uint64_t> pushes;         // push key -> committed tokens
  std::string damage;                          // what is wrong at `end`; empty: intact or torn
  std::string torn;                            // why the tail at `end` counts as torn
};

// Checks the record at s.end; true when it is intact (and counted).
bool scan_record(int fd, uint64_t size, Scan& s) {
  Header h;
  switch (read_header(fd, s.end, size - s.end, h)) {
    case HeaderRead::kShort:
      s.torn = "incomplete header";
      return false;
    case HeaderRead::kBad:
      if (zeros_from(fd, s.end, size)) s.torn = "zero-filled tail";
      else s.damage = "header checksum mismatch";
      return false;
    case HeaderRead::kOk:
      break;
  }
  if (h.record_bytes() > size - s.end) {
    s.torn = "payload of " + std::to_string(h.payload_bytes()) + " bytes runs past the end of the file";
    return false;
  }
  uint32_t c = 0;
  if (!payload_crc(fd, s.end + h.size, h.payload_bytes(), c) || c != h.payload_crc) {
    s.damage = "payload checksum mismatch (" + std::to_string(h.count) + " tokens)";
    return false;
  }
  if (h.key) s.pushes[h.key] = std::max(s.pushes[h.key], h.offset + h.count);
  s.end += h.record_bytes();
  s.tokens += h.count;
  ++s.records;
  return true;
}

}  // namespace

uint64_t token_checksum(uint32_t token) { return mix64(token); }  // splitmix64, as the engine's

uint64_t push_key(const std::string& push_id) {
  const uint64_t h = fnv1a64(push_id);
  return h ? h : 1;
}

Result<std::shared_ptr<PushSpool>> PushSpool::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) return internal_error(errno_text("cannot open spool", path));
  struct stat st {};
  ::fstat(fd, &st);
  const uint64_t size = uint64_t(st.st_size);
  Scan s;
  while (s.end < size && scan_record(fd, size, s)) {
  }
  if (!s.damage.empty()) {
    const int64_t next = next_intact(fd, s.end, size);
    const std::string msg = "push spool '" + path + "' is corrupt at record " + std::to_string(s.records) +
                            " (byte " + std::to_string(s.end) + " of " + std::to_string(size) + "): " + s.damage +
                            (next >= 0 ? "; an intact record follows at byte " + std::to_string(next)
                                       : "; no intact record follows") +
                            ". Nothing was truncated: records before it hold " + std::to_string(s.tokens) +
                            " tokens, and the file is left as it is";
    spdlog::error("{}", msg);
    ::close(fd);
    return data_loss(msg);
  }
  if (s.end != size) {
    spdlog::warn("push spool '{}': dropping a torn tail of {} bytes at record {} (byte {}): {}", path, size - s.end,
                 s.records, s.end, s.torn);
    if (::ftruncate(fd, off_t(s.end)) != 0 || ::fdatasync(fd) != 0) {
      ::close(fd);
      return internal_error(errno_text("cannot truncate the torn tail of spool", path));
    }
  }
  if (::lseek(fd, off_t(s.end), SEEK_SET) < 0) {
    ::close(fd);
    return internal_error(errno_text("cannot seek spool", path));
  }
  return std::shared_ptr<PushSpool>(new PushSpool(path, fd, s.tokens, std::move(s.pushes)));
}

PushSpool::~PushSpool() {
  if (fd_ >= 0) ::close(fd_);
}

uint64_t PushSpool::committed(uint64_t key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pushes_.find(key);
  return it == pushes_.end() ? 0 : it->second;
}

Result<uint64_t> PushSpool::append(const uint32_t* tokens, size_t n, PushAt at) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = at.key ? pushes_.find(at.key) : pushes_.end();
  const uint64_t have = it == pushes_.end() ? 0 : it->second;
  if (at.offset > have)
    return failed_precondition("offset " + std::to_string(at.offset) + " is past the " + std::to_string(have) +
                               " tokens this push has spooled; resume at offset " + std::to_string(have));
  const uint64_t skip = at.key ? have - at.offset : 0;  // already spooled by an earlier try
  if (skip >= n) return at.key ? have : 0;
  tokens += skip, n -= size_t(skip);
  if (n > 0xffffffffu) return invalid_argument("chunk too large");
  Header h;
  h.count = uint32_t(n);
  h.payload_crc = crc(tokens, n * 4);
  h.key = at.key;
  h.offset = at.key ? have : 0;
  const auto w = encode_v2(h);
  const off_t start = ::lseek(fd_, 0, SEEK_CUR);
  if (!write_all(fd_, w.data(), kHeaderV2) || !write_all(fd_, tokens, n * 4) || ::fdatasync(fd_) != 0) {
    const Status failed = spool_write_failure(path_, errno);
    // Leave no partial record behind: later appends must follow the last good one.
    if (start >= 0 && ::ftruncate(fd_, start) == 0) ::lseek(fd_, start, SEEK_SET);
    return failed;
  }
  if (at.key) pushes_[at.key] = have + n;
  tokens_ += n;
  cv_.notify_all();
  return at.key ? have + n : uint64_t(n);
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
        Header h;
        if (read_header(fd_, next_off_, UINT64_MAX - next_off_, h) != HeaderRead::kOk)
          return data_loss("push data: bad record header at byte " + std::to_string(next_off_) + " of '" +
                           spool_->path() + "'");
        payload_off_ = next_off_ + h.size;
        rec_len_ = h.count;
        rec_pos_ = 0;
        next_off_ = payload_off_ + h.payload_bytes();
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

#include "server/log_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/base/utc_time.h"

namespace mt::server {

namespace {

constexpr size_t kReadChunk = 64 << 10;

// Valid UTF-8 for the proto's string fields: a byte that does not start a well-formed sequence
// (a cut line, a path in another encoding) becomes '?'.
std::string valid_utf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size() && !(n == 2 && c < 0xc2);
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 0x2;
    if (ok) out.append(s, i, n);
    else out.push_back('?');
    i += ok ? n : 1;
  }
  return out;
}

Result<int> open_read(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return not_found("cannot open '" + path + "': " + std::strerror(errno));
  return fd;
}

// Calls f(offset just past the newline) for every newline of the file.
template <typename F>
void scan_newlines(int fd, F&& f) {
  std::string buf(kReadChunk, '\0');
  uint64_t off = 0;
  for (ssize_t n; (n = ::pread(fd, buf.data(), buf.size(), off_t(off))) > 0; off += uint64_t(n))
    for (ssize_t i = 0; i < n; ++i)
      if (buf[size_t(i)] == '\n' && !f(off + uint64_t(i) + 1)) return;
}

uint64_t count_lines(int fd) {
  uint64_t n = 0;
  scan_newlines(fd, [&](uint64_t) { return ++n, true; });
  return n;
}

// The offset of line `k` (0-based): just past the k-th newline.
uint64_t offset_of_line(int fd, uint64_t k) {
  if (k == 0) return 0;
  uint64_t seen = 0, at = 0;
  scan_newlines(fd, [&](uint64_t off) {
    at = off;
    return ++seen < k;
  });
  return at;
}

}  // namespace

LogLine parse_log_line(const std::string& line) {
  LogLine out;
  size_t used = 0;
  if (auto t = parse_utc_time(line, &used); t.ok() && used < line.size() && line[used] == ' ') {
    out.unix_ms = *t;
    const size_t space = line.find(' ', used + 1);
    out.level = line.substr(used + 1, space == std::string::npos ? std::string::npos : space - used - 1);
    out.text = space == std::string::npos ? "" : valid_utf8(line.substr(space + 1));
    return out;
  }
  out.text = valid_utf8(line);
  return out;
}

// ---- LogFile -----------------------------------------------------------------------------------

Result<std::shared_ptr<LogFile>> LogFile::open(const std::string& path, uint64_t max_bytes, bool closed) {
  std::shared_ptr<LogFile> log(new LogFile(path, max_bytes ? max_bytes : kDefaultMaxBytes));
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return internal_error("cannot open the log '" + path + "': " + std::strerror(errno));
  const off_t end = ::lseek(fd, 0, SEEK_END);
  ::close(fd);
  log->size_ = end > 0 ? uint64_t(end) : 0;
  log->closed_ = closed;
  return log;
}

void LogFile::append(const std::string& level, const std::string& text) { append_at(unix_ms_now(), level, text); }

void LogFile::append_at(int64_t unix_ms, const std::string& level, const std::string& text) {
  const std::string head = utc_time_text(unix_ms) + " " + level + " ";
  std::string lines;
  uint64_t count = 0;
  for (size_t start = 0; start <= text.size(); ++count) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string piece = text.substr(start, std::min(end - start, kMaxLineBytes));
    if (!piece.empty() && piece.back() == '\r') piece.pop_back();
    lines += head + piece + "\n";
    start = end + 1;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    const std::string lost_note = !lost_lines_ ? ""
                                  : utc_time_text(unix_ms) + " warning " + std::to_string(lost_lines_) +
                                        " log line(s) before this one could not be written: " + lost_why_ + "\n";
    if (Status s = write_lines(lost_note + lines); !s.ok()) {
      if (!lost_lines_) lost_why_ = s.message();
      lost_lines_ += count;
      return;
    }
    lost_lines_ = 0;
  }
  wake_all();
}

Status LogFile::write_lines(const std::string& lines) {
  if (size_ > 0 && size_ + lines.size() > max_bytes_) MT_RETURN_IF_ERROR(rotate());
  // Opened for each append: a daemon with thousands of jobs holds no descriptor per log.
  const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return internal_error("cannot open '" + path_ + "': " + std::strerror(errno));
  // Where this write begins: size_ unless the file was changed from outside (emptied, replaced).
  const off_t end = ::lseek(fd, 0, SEEK_END);
  const ssize_t n = ::write(fd, lines.data(), lines.size());
  const int err = errno;
  if (n == ssize_t(lines.size())) {
    ::close(fd);
    size_ += uint64_t(n);
    return Status::Ok();
  }
  if (n > 0 && (end < 0 || ::ftruncate(fd, end) != 0)) size_ += uint64_t(n);  // a torn line left: counted
  ::close(fd);
  return internal_error("cannot write '" + path_ + "': " +
                        (n < 0 ? std::string(std::strerror(err))
                               : "wrote " + std::to_string(n) + " of " + std::to_string(lines.size()) + " bytes"));
}

Status LogFile::rotate() {
  const std::string old = path_ + ".1";
  if (::rename(path_.c_str(), old.c_str()) != 0)
    return internal_error("cannot rotate '" + path_ + "': " + std::strerror(errno));
  // The new file exists at once: a reader opening the log finds it.
  const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return internal_error("cannot reopen '" + path_ + "': " + std::strerror(errno));
  ::close(fd);
  size_ = 0;
  gen_ += 1;
  return Status::Ok();
}

void LogFile::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
  }
  wake_all();
}

bool LogFile::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

uint64_t LogFile::listen(Wake wake) {
  std::lock_guard<std::mutex> lock(listeners_mu_);
  listeners_[next_listener_] = std::move(wake);
  return next_listener_++;
}

void LogFile::unlisten(uint64_t token) {
  std::lock_guard<std::mutex> lock(listeners_mu_);
  listeners_.erase(token);
}

void LogFile::wake_all() {
  std::vector<Wake> wakes;
  {
    std::lock_guard<std::mutex> lock(listeners_mu_);
    for (const auto& [token, w] : listeners_) wakes.push_back(w);
  }
  for (auto& w : wakes) w();
}

// ---- LogCursor ---------------------------------------------------------------------------------

Result<LogCursor> LogCursor::open(std::shared_ptr<LogFile> log, uint64_t tail_lines) {
  LogCursor c;
  c.log_ = log;
  int old_fd = -1;
  {
    // Which file holds which generation is stable only under the lock.
    std::lock_guard<std::mutex> lock(log->mu_);
    MT_ASSIGN_OR_RETURN(c.fd_, open_read(log->path_));
    c.gen_ = log->gen_;
    if (auto fd = open_read(log->path_ + ".1"); fd.ok()) old_fd = *fd;
  }
  if (tail_lines > 0) {
    const uint64_t lines = count_lines(c.fd_);
    if (lines >= tail_lines || old_fd < 0) {
      c.offset_ = offset_of_line(c.fd_, lines >= tail_lines ? lines - tail_lines : 0);
      if (old_fd >= 0) ::close(old_fd);
      return c;
    }
    tail_lines -= lines;  // the rest from the older file
  }
  if (old_fd >= 0) {
    ::close(c.fd_);
    c.fd_ = old_fd;
    c.gen_ -= 1;
    const uint64_t lines = tail_lines > 0 ? count_lines(c.fd_) : 0;
    c.offset_ = offset_of_line(c.fd_, lines > tail_lines ? lines - tail_lines : 0);
  }
  return c;
}

LogCursor::LogCursor(LogCursor&& o) noexcept { *this = std::move(o); }

LogCursor& LogCursor::operator=(LogCursor&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    log_ = std::move(o.log_);
    fd_ = o.fd_;
    gen_ = o.gen_;
    offset_ = o.offset_;
    finished_ = o.finished_;
    o.fd_ = -1;
  }
  return *this;
}

LogCursor::~LogCursor() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {
// Parses the complete lines of one read at `offset`; returns the bytes consumed.
size_t read_lines(int fd, uint64_t offset, size_t max_bytes, std::vector<LogLine>& out) {
  std::string buf(std::max(max_bytes, LogFile::kMaxLineBytes + 256), '\0');
  const ssize_t n = ::pread(fd, buf.data(), buf.size(), off_t(offset));
  if (n <= 0) return 0;
  size_t used = 0;
  for (size_t nl; (nl = buf.find('\n', used)) < size_t(n); used = nl + 1)
    out.push_back(parse_log_line(buf.substr(used, nl - used)));
  if (used == 0 && size_t(n) == buf.size()) {  // a line longer than any we write (an older file)
    out.push_back(parse_log_line(buf));
    used = buf.size();
  }
  return used;
}
}  // namespace

Status LogCursor::read(std::vector<LogLine>& out, size_t max_bytes) {
  const size_t had = out.size();
  while (!finished_) {
    if (size_t used = read_lines(fd_, offset_, max_bytes, out)) {
      offset_ += used;
      return Status::Ok();
    }
    {
      std::lock_guard<std::mutex> lock(log_->mu_);
      if (gen_ == log_->gen_) {
        if (offset_ < log_->size_) continue;  // a line landed between the read and the lock
        finished_ = log_->closed_;
        return Status::Ok();
      }
    }
    // Rotated away: the file is final now, so one more read finds whatever landed before that.
    if (size_t used = read_lines(fd_, offset_, max_bytes, out)) {
      offset_ += used;
      return Status::Ok();
    }
    MT_RETURN_IF_ERROR(next_file(out));
    if (out.size() > had) return Status::Ok();  // the warning of lines lost
  }
  return Status::Ok();
}

Status LogCursor::next_file(std::vector<LogLine>& out) {
  std::lock_guard<std::mutex> lock(log_->mu_);
  const uint64_t want = gen_ + 1, current = log_->gen_;
  Result<int> fd = want == current ? open_read(log_->path_) : open_read(log_->path_ + ".1");
  uint64_t gen = want == current ? current : current - 1;
  if (!fd.ok()) {  // PATH.1 removed by hand: on to the current file
    fd = open_read(log_->path_);
    if (!fd.ok()) return fd.status();
    gen = current;
  }
  if (gen != want)
    out.push_back({unix_ms_now(), "warning",
                   "this reader fell behind the log's rotation: " + std::to_string(gen - want) +
                       " log file(s) of lines were removed before it read them"});
  ::close(fd_);
  fd_ = *fd;
  gen_ = gen;
  offset_ = 0;
  return Status::Ok();
}

}  // namespace mt::server

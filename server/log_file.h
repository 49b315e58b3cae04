// Durable, bounded, followable logs: each job's (STATE_DIR/jobs/ID/log.txt) and the daemon's own
// (STATE_DIR/daemon.log).
//
// A line is "2026-11-30T16:05:01.123Z info TEXT\n", appended with one write(2) (the file opened
// for it: no descriptor is held per log) the moment it is logged, so it survives the daemon's crash or kill -9 (not a power cut: lines are not
// fsynced). Text with newlines becomes several lines; a line is cut at kMaxLineBytes. Lines that
// cannot be written (a full disk, a directory gone) are counted; the next line that can be is
// preceded by a warning saying how many were lost and why, and a short write is cut back, so the
// file never holds a torn line.
// The size is bounded by rotation: a line that would take the file past max_bytes first renames
// it to PATH.1 (replacing the previous PATH.1) and starts a new PATH, so a log keeps its last
// max_bytes to 2 x max_bytes on disk.
//
// Readers (LogCursor) hold a file descriptor and an offset, never a copy of the lines: a follower
// that reads slowly costs the daemon no memory, only its place in the file, and it follows the
// rotation (the descriptor keeps the renamed file readable). A reader so far behind that two
// rotations passed it loses the lines between and gets one warning line saying so.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/base/status.h"

namespace mt::server {

struct LogLine {
  int64_t unix_ms = 0;  // 0 when the line was not written in this format
  std::string level, text;
};

class LogFile {
 public:
  static constexpr size_t kMaxLineBytes = 16 << 10;
  static constexpr uint64_t kDefaultMaxBytes = 16 << 20;

  // Opens (creating) PATH for appending. A `closed` log (a job that has ended) takes no lines.
  static Result<std::shared_ptr<LogFile>> open(const std::string& path, uint64_t max_bytes, bool closed = false);

  void append(const std::string& level, const std::string& text);
  void append_at(int64_t unix_ms, const std::string& level, const std::string& text);
  // No more lines (the job ended): followers end after the last one.
  void close();
  bool closed() const;
  const std::string& path() const { return path_; }

  // `wake` runs after every append and at close, on the caller's thread, outside the log's lock.
  using Wake = std::function<void()>;
  uint64_t listen(Wake wake);
  void unlisten(uint64_t token);

 private:
  friend class LogCursor;
  LogFile(std::string path, uint64_t max_bytes) : path_(std::move(path)), max_bytes_(max_bytes) {}
  Status rotate();                             // mu_ held
  Status write_lines(const std::string& lines);  // mu_ held: all of them, or none
  void wake_all();

  const std::string path_;
  const uint64_t max_bytes_;
  mutable std::mutex mu_;
  uint64_t size_ = 0;    // of the current file
  uint64_t gen_ = 1;     // the current file's generation; PATH.1 holds gen_ - 1
  bool closed_ = false;
  uint64_t lost_lines_ = 0;  // lines that could not be written since the last that could
  std::string lost_why_;     // the first reason
  std::mutex listeners_mu_;
  std::map<uint64_t, Wake> listeners_;
  uint64_t next_listener_ = 1;
};

// A reader's place in a log.
class LogCursor {
 public:
  // At the oldest line kept, or (tail_lines > 0) at the last tail_lines lines.
  static Result<LogCursor> open(std::shared_ptr<LogFile> log, uint64_t tail_lines);
  LogCursor(LogCursor&& o) noexcept;
  LogCursor& operator=(LogCursor&& o) noexcept;
  ~LogCursor();

  // Appends the complete lines available now, up to about max_bytes of them (at least one); none
  // when the reader has caught up with the writer.
  Status read(std::vector<LogLine>& out, size_t max_bytes);
  // The log is closed and every line has been read.
  bool finished() const { return finished_; }

 private:
  LogCursor() = default;
  // The old file is read to its end: on to the next generation (a warning line in `out` when
  // rotations removed the ones between).
  Status next_file(std::vector<LogLine>& out);
  std::shared_ptr<LogFile> log_;
  int fd_ = -1;
  uint64_t gen_ = 0, offset_ = 0;
  bool finished_ = false;
};

// "2026-11-30T16:05:01.123Z info text" -> its parts; a line in another format is all text.
LogLine parse_log_line(const std::string& line);

}  // namespace mt::server

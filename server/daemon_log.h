// megatraind's own log kept like a job's: while installed, every line spdlog's default logger
// writes (to stderr, as before) also goes to STATE_DIR/daemon.log, a LogFile that StreamLogs
// serves with job_id "daemon".
#pragma once
#include <memory>
#include <string>

#include "server/log_file.h"

namespace spdlog {
class logger;
}

namespace mt::server {

class DaemonLog {
 public:
  // Makes the default logger one that writes to its old sinks and to `path`.
  static Result<std::unique_ptr<DaemonLog>> install(const std::string& path, uint64_t max_bytes);
  ~DaemonLog();  // puts the previous default logger back (install/uninstall nest, last in first out)
  std::shared_ptr<LogFile> file() const { return file_; }

 private:
  DaemonLog() = default;
  std::shared_ptr<LogFile> file_;
  std::shared_ptr<spdlog::logger> previous_, ours_;
};

}  // namespace mt::server

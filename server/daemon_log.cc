#include "server/daemon_log.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>

namespace mt::server {

namespace {

class LogFileSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit LogFileSink(std::shared_ptr<LogFile> file) : file_(std::move(file)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(msg.time.time_since_epoch()).count();
    const auto level = spdlog::level::to_string_view(msg.level);
    file_->append_at(int64_t(ms), std::string(level.data(), level.size()),
                     std::string(msg.payload.data(), msg.payload.size()));
  }
  void flush_() override {}  // every line is written as it is logged

 private:
  std::shared_ptr<LogFile> file_;
};

}  // namespace

Result<std::unique_ptr<DaemonLog>> DaemonLog::install(const std::string& path, uint64_t max_bytes) {
  std::unique_ptr<DaemonLog> d(new DaemonLog());
  MT_ASSIGN_OR_RETURN(d->file_, LogFile::open(path, max_bytes));
  d->previous_ = spdlog::default_logger();
  std::vector<spdlog::sink_ptr> sinks = d->previous_->sinks();
  sinks.push_back(std::make_shared<LogFileSink>(d->file_));
  d->ours_ = std::make_shared<spdlog::logger>(d->previous_->name(), sinks.begin(), sinks.end());
  d->ours_->set_level(d->previous_->level());
  spdlog::set_default_logger(d->ours_);
  return d;
}

DaemonLog::~DaemonLog() {
  if (previous_) spdlog::set_default_logger(previous_);
}

}  // namespace mt::server

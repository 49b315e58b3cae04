#include "server/log_stream.h"

#include <mutex>

#include "server/status_map.h"

namespace mt::server {

namespace v1 = megatrain::v1;

namespace {

constexpr size_t kBatchBytes = 32 << 10;  // per message, well under any --max_message_bytes

class LogStreamReactor final : public grpc::ServerWriteReactor<v1::StreamLogsResponse> {
 public:
  explicit LogStreamReactor(StreamSlots::Slot slot) : state_(std::make_shared<State>()), slot_(std::move(slot)) {
    state_->r = this;
  }

  void fail(const grpc::Status& s) {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->finished = true;
    Finish(s);
  }

  void start(std::shared_ptr<LogFile> log, const v1::StreamLogsRequest& req) {
    if (req.tail_lines() < 0 || req.since_unix_ms() < 0)
      return fail({grpc::StatusCode::INVALID_ARGUMENT, "tail_lines and since_unix_ms must not be negative"});
    auto cursor = LogCursor::open(log, uint64_t(req.tail_lines()));
    if (!cursor.ok()) return fail(to_grpc(cursor.status()));
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->log = log;
    state_->cursor = std::make_unique<LogCursor>(std::move(cursor).value());
    state_->follow = req.follow();
    state_->since = req.since_unix_ms();
    // Listening before the first read: a line appended from here on wakes the pump. The headers
    // go out at once, so a follower can tell that it is listening before any line exists.
    if (state_->follow) {
      state_->token = log->listen([s = std::weak_ptr<State>(state_)] {
        if (auto st = s.lock()) st->wake();
      });
      StartSendInitialMetadata();
    }
    state_->pump();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->writing = false;
    if (!ok) {
      if (!state_->finished) {
        state_->finished = true;
        Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
      }
      return;
    }
    state_->pump();
  }
  void OnCancel() override {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->finished) {
      state_->finished = true;
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "log stream cancelled"));
    }
  }
  void OnDone() override {
    std::shared_ptr<LogFile> log;
    uint64_t token = 0;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->r = nullptr;
      log = state_->log;
      token = state_->token;
    }
    if (log && token) log->unlisten(token);
    delete this;
  }

 private:
  // Shared with the log's listener, which may run after the reactor is gone (r = nullptr then).
  struct State {
    std::mutex mu;
    LogStreamReactor* r = nullptr;
    std::shared_ptr<LogFile> log;
    std::unique_ptr<LogCursor> cursor;
    v1::StreamLogsResponse msg;
    std::vector<LogLine> lines;
    bool follow = false, writing = false, finished = false;
    int64_t since = 0;
    uint64_t token = 0;

    void wake() {
      std::lock_guard<std::mutex> lock(mu);
      pump();
    }
    // mu held. Writes the next batch, or finishes, or (following) waits for a wake.
    void pump() {
      if (!r || writing || finished) return;
      msg.Clear();
      while (msg.lines_size() == 0) {
        lines.clear();
        if (Status st = cursor->read(lines, kBatchBytes); !st.ok()) {
          finished = true;
          r->Finish(to_grpc(st));
          return;
        }
        if (lines.empty()) break;
        for (const LogLine& l : lines) {
          if (since > 0 && l.unix_ms < since) continue;
          v1::LogLine* out = msg.add_lines();
          out->set_unix_ms(l.unix_ms);
          out->set_level(l.level);
          out->set_text(l.text);
        }
      }
      if (msg.lines_size() > 0) {
        writing = true;
        r->StartWrite(&msg);
      } else if (!follow || cursor->finished()) {
        finished = true;
        r->Finish(grpc::Status::OK);
      }
    }
  };

  std::shared_ptr<State> state_;
  StreamSlots::Slot slot_;  // freed when the reactor is deleted
};

}  // namespace

grpc::ServerWriteReactor<v1::StreamLogsResponse>* stream_logs(const grpc::Status& refused,
                                                              std::shared_ptr<LogFile> log,
                                                              const v1::StreamLogsRequest& req,
                                                              StreamSlots::Slot slot) {
  auto* r = new LogStreamReactor(std::move(slot));
  if (!refused.ok()) r->fail(refused);
  else r->start(std::move(log), req);
  return r;
}

}  // namespace mt::server

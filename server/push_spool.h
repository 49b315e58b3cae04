// Durable spool for pushed token data, and the DataSource a push job reads it through.
// File format: a sequence of records, each a 16-byte header {magic 'MTSP', token count, CRC-32
// of the payload, CRC-32 of the first 12 header bytes} followed by the tokens as little-endian
// uint32. A record is acknowledged only after write + fdatasync. On open, a torn or corrupt
// tail (a crash mid-append, never acknowledged) is truncated away.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "engine/data/data_source.h"

namespace mt::server {

class PushSpool {
 public:
  static Result<std::shared_ptr<PushSpool>> open(const std::string& path);
  ~PushSpool();

  // Appends one record and fsyncs it; thread-safe. Tokens must already be validated.
  Status append(const uint32_t* tokens, size_t n);
  uint64_t tokens() const { return tokens_.load(); }
  // Waits until at least `n` tokens are spooled; false on timeout or once stopped.
  bool wait_for(uint64_t n, std::chrono::milliseconds timeout);
  void stop();  // wakes every waiter for good (job cancelled, daemon stopping)
  bool stopped() const { return stopped_.load(); }
  const std::string& path() const { return path_; }

 private:
  PushSpool(std::string path, int fd, uint64_t tokens) : path_(std::move(path)), fd_(fd), tokens_(tokens) {}
  std::string path_;
  int fd_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> tokens_{0};
  std::atomic<bool> stopped_{false};
};

// Tokens consumed by a push job, for status and the exactly-once checks: count and the sum of
// splitmix64(token) (order-independent).
struct PushProgress {
  std::atomic<uint64_t> consumed{0};
  std::atomic<uint64_t> checksum{0};
  std::atomic<bool> waiting{false};
  std::atomic<bool> interrupt{false};  // set: a waiting source returns UNAVAILABLE once (checkpoint-now)
};
uint64_t token_checksum(uint32_t token);

// Reads the spool in windows of seq_len + 1 tokens (inputs and shifted targets), one window per
// sequence, so every token is consumed exactly once. Memory is bounded by one batch. Waits while
// the spool is short (progress->waiting), returning UNAVAILABLE every kStarvedCheck of waiting and
// when interrupted (so the runner can checkpoint or yield the device), and CANCELLED once the
// spool is stopped.
inline constexpr std::chrono::milliseconds kStarvedCheck{1000};
Result<std::unique_ptr<DataSource>> make_push_source(std::shared_ptr<PushSpool> spool, int vocab,
                                                     std::shared_ptr<PushProgress> progress);

}  // namespace mt::server

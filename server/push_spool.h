// Durable spool for pushed token data, and the DataSource a push job reads it through.
//
// File format: a sequence of records, each a header followed by its tokens as little-endian
// uint32. Two header kinds, told apart by their magic:
//   'MTS2' (written now), 32 bytes: {magic, token count, CRC-32 of the payload, CRC-32 of these
//          32 bytes with this field 0, push key (u64; 0: no push id), offset of the record's first
//          token within that push (u64)}
//   'MTSP' (older spools, still read), 16 bytes: {magic, token count, payload CRC-32, CRC-32 of
//          the first 12 header bytes}
// A record is acknowledged only after write + fdatasync, one record at a time, so at most the
// last record of the file can be unacknowledged.
//
// Recovery on open (the rule): records are checked in order. At the first record that is not
// intact (header checksum, payload within the file, payload checksum):
//   - a torn tail, truncated away (and logged): the record is incomplete, i.e. fewer bytes than
//     a header remain, or its intact header says the payload runs past the end of the file, or
//     its header is damaged and every byte from it to the end of the file is zero (a zero-filled
//     tail after a power loss). That is what an append cut short by a crash leaves, and such a
//     record was never acknowledged.
//   - anything else is corruption: a complete record whose payload checksum fails, or a damaged
//     header followed by non-zero bytes. It may hold acknowledged data (and records after it
//     surely do), and it cannot be told from bit rot, so nothing is truncated: open fails with
//     DATA_LOSS naming the record number, its byte offset, what failed and where the next intact
//     record starts, and the file is left exactly as it was. A crashed append cannot produce a
//     full-length record with a bad checksum on the filesystems we run on (the size grows only
//     with the data); an operator who knows better truncates the file at the named offset.
//
// Exactly-once pushes: a record may carry a push key (a hash of the client's push id) and the
// offset of its first token within that push. The spool keeps each push's committed token count
// (rebuilt by the scan on open), and an append at an offset the push already has skips the
// tokens it already holds, so a retried or resumed push spools every token exactly once.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "engine/data/data_source.h"

namespace mt::server {

// Where a chunk's tokens sit in a push: key 0 is an anonymous chunk (no push id, spooled as is).
struct PushAt {
  uint64_t key = 0;
  uint64_t offset = 0;  // of the chunk's first token within the push
};

class PushSpool {
 public:
  static Result<std::shared_ptr<PushSpool>> open(const std::string& path);
  ~PushSpool();

  // Appends the tokens the push does not hold yet as one record and fsyncs it; thread-safe.
  // Tokens must already be validated. Returns the push's committed tokens after the append (for
  // key 0: the tokens appended). FAILED_PRECONDITION when `at.offset` is past what the push has.
  Result<uint64_t> append(const uint32_t* tokens, size_t n, PushAt at = {});
  uint64_t committed(uint64_t key) const;  // the push's tokens durably spooled (0: unknown push)
  uint64_t tokens() const { return tokens_.load(); }
  // Waits until at least `n` tokens are spooled; false on timeout or once stopped.
  bool wait_for(uint64_t n, std::chrono::milliseconds timeout);
  void stop();  // wakes every waiter for good (job cancelled, daemon stopping)
  bool stopped() const { return stopped_.load(); }
  const std::string& path() const { return path_; }

 private:
  PushSpool(std::string path, int fd, uint64_t tokens, std::map<uint64_t, uint64_t> pushes)
      : path_(std::move(path)), fd_(fd), pushes_(std::move(pushes)), tokens_(tokens) {}
  std::string path_;
  int fd_ = -1;
  mutable std::mutex mu_;
  std::map<uint64_t, uint64_t> pushes_;  // push key -> committed tokens; mu_
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
// The spool's key of a client's push id (64-bit FNV-1a, never 0).
uint64_t push_key(const std::string& push_id);

// Reads the spool in windows of seq_len + 1 tokens (inputs and shifted targets), one window per
// sequence, so every token is consumed exactly once. Memory is bounded by one batch. Waits while
// the spool is short (progress->waiting), returning UNAVAILABLE every kStarvedCheck of waiting and
// when interrupted (so the runner can checkpoint or yield the device), and CANCELLED once the
// spool is stopped.
inline constexpr std::chrono::milliseconds kStarvedCheck{1000};
Result<std::unique_ptr<DataSource>> make_push_source(std::shared_ptr<PushSpool> spool, int vocab,
                                                     std::shared_ptr<PushProgress> progress);

}  // namespace mt::server

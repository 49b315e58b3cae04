// TensorBoard event files, written without TensorFlow or protobuf. A file is a sequence of
// TFRecords — uint64 length, uint32 masked CRC-32C of the length, the data, uint32 masked
// CRC-32C of the data — each holding one Event (tensorflow/core/util/event.proto):
//   Event   { 1: wall_time (double), 2: step (int64), 3: file_version (string), 5: summary }
//   Summary { 1: repeated Value }   Value { 1: tag (string), 2: simple_value (float) }
// TensorBoard's reader stops at a torn last record, so a job killed mid-write leaves a file it
// still reads; reopening for a resumed run also drops the steps that run trains again.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/base/status.h"

namespace mt {

// The one event file of a job's TensorBoard directory ("tfevents" in its name is what
// TensorBoard looks for).
inline constexpr const char* kTensorBoardFile = "events.out.tfevents.megatrain";

using Scalars = std::vector<std::pair<std::string, double>>;  // tag, value (stored as float)

class TensorBoardWriter {
 public:
  // Opens DIR/kTensorBoardFile (creating DIR and the file). A new file starts with the version
  // record. An existing one keeps its valid records with step <= keep_through and loses the
  // rest: a torn last record, and the steps a killed run logged after its last checkpoint, which
  // the resumed run trains (and logs) again — so no step is ever in the file twice.
  static Result<std::unique_ptr<TensorBoardWriter>> open(const std::string& dir, long keep_through);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One Event at `step` with these scalars, appended with one write: in the file (the page
  // cache) when this returns, so a kill -9 after it loses nothing. A failed write (a full disk)
  // is cut back to the last whole record, so the next call may succeed where this one did not.
  Status scalars(long step, double wall_time, const Scalars& values);
  Status sync();  // fsync: on disk (the job calls it at each checkpoint)
  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  Status append(const std::string& event);
  int fd_;
  std::string path_;
  uint64_t end_ = 0;     // the end of the last whole record
  bool broken_ = false;  // a failed write could not be cut back
};

// What an event file holds, read back (tests, and open's truncation).
struct TensorBoardEvent {
  double wall_time = 0;
  long step = 0;
  std::string file_version;  // the first record's "brain.Event:2"
  Scalars scalars;
};
struct TensorBoardFile {
  std::vector<TensorBoardEvent> events;  // the valid records, in order
  std::vector<uint64_t> ends;            // the byte offset just past each of them
  uint64_t size = 0;                     // the file's bytes (> ends.back() after a torn record)
};
Result<TensorBoardFile> read_tensorboard_file(const std::string& path);

// CRC-32C (Castagnoli) of `n` bytes, and TensorFlow's masking of it for TFRecords.
uint32_t crc32c(const void* data, size_t n);
inline uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

}  // namespace mt

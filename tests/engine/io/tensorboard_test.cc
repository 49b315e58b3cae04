// TensorBoard event files (engine/io/tensorboard.h): the bytes are TensorFlow's (CRC-32C check
// value, the version record byte for byte), what is written reads back, a torn last record (a
// kill -9 mid-write) is dropped on reopen and never corrupts what follows, and a resumed run's
// steps replace those its killed predecessor logged after its checkpoint: no step twice.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/io/tensorboard.h"
#include "tests/engine/temp_dir.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

// Each test's own directory under one TempDir (removed at exit); the writer creates it.
std::string fresh(const std::string& name) {
  static testing_util::TempDir root("mt-tensorboard");
  return root / name;
}

std::vector<long> steps_of(const std::string& path) {
  auto f = read_tensorboard_file(path);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  std::vector<long> out;
  if (f.ok())
    for (size_t i = 1; i < f->events.size(); ++i) out.push_back(f->events[i].step);
  return out;
}

void log_steps(TensorBoardWriter& w, long from, long to) {
  for (long s = from; s <= to; ++s)
    ASSERT_TRUE(w.scalars(s, 1e9 + double(s), {{"train/loss", 1.0 / double(s)}, {"train/grad_norm", 0.5}}).ok());
}

// A fresh file in `dir` with steps 1..last, closed as a killed run leaves it; its path.
std::string run_logging(const std::string& dir, long last) {
  auto w = TensorBoardWriter::open(dir, 0);
  EXPECT_TRUE(w.ok()) << w.status().to_string();
  if (!w.ok()) return dir + "/" + kTensorBoardFile;
  log_steps(**w, 1, last);
  return (*w)->path();
}

TEST(TensorBoard, Crc32cIsCastagnoli) {
  EXPECT_EQ(crc32c("123456789", 9), 0xe3069283u);  // the standard check value
  EXPECT_EQ(crc32c("", 0), 0u);
}

// Stamped with the time it was written (TensorBoard takes the first event's wall_time for the
// run's start; a 0 there sorted every run at 1970).
// The bounds read the writer's clock (system_clock): std::time reads CLOCK_REALTIME_COARSE, a
// tick behind, and failed the upper bound once when the stamp fell just past a second's boundary.
double now_seconds() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

TEST(TensorBoard, TheVersionRecordIsTensorFlowsBytes) {
  const std::string dir = fresh("version");
  const double before = now_seconds();
  ASSERT_TRUE(TensorBoardWriter::open(dir, 0).ok());
  std::ifstream in(dir + "/" + kTensorBoardFile, std::ios::binary);
  const std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  double stamped = 0;
  ASSERT_GE(got.size(), 21u);
  std::memcpy(&stamped, got.data() + 13, 8);
  EXPECT_GE(stamped, before);
  EXPECT_LE(stamped, now_seconds());
  // Event{wall_time (field 1, fixed64), file_version: "brain.Event:2" (field 3)}.
  std::string wall(8, '\0');
  std::memcpy(wall.data(), &stamped, 8);
  const std::string data = std::string("\x09", 1) + wall + "\x1a\x0d" "brain.Event:2";
  ASSERT_EQ(got.size(), 8 + 4 + data.size() + 4);
  uint64_t len = 0;
  std::memcpy(&len, got.data(), 8);
  EXPECT_EQ(len, data.size());
  EXPECT_EQ(got.substr(12, data.size()), data);
  uint32_t crc = 0;
  std::memcpy(&crc, got.data() + 12 + data.size(), 4);
  EXPECT_EQ(crc, masked_crc32c(data.data(), data.size()));
}

TEST(TensorBoard, ScalarsReadBack) {
  const std::string dir = fresh("read_back");
  auto w = TensorBoardWriter::open(dir, 0);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  log_steps(**w, 1, 3);
  auto f = read_tensorboard_file((*w)->path());
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(f->events.size(), 4u);
  EXPECT_EQ(f->events[0].file_version, "brain.Event:2");
  EXPECT_EQ(f->ends.back(), f->size);
  for (long s = 1; s <= 3; ++s) {
    const TensorBoardEvent& e = f->events[size_t(s)];
    EXPECT_EQ(e.step, s);
    EXPECT_EQ(e.wall_time, 1e9 + double(s));
    ASSERT_EQ(e.scalars.size(), 2u);
    EXPECT_EQ(e.scalars[0].first, "train/loss");
    EXPECT_EQ(e.scalars[0].second, double(float(1.0 / double(s))));  // simple_value is a float
    EXPECT_EQ(e.scalars[1], (std::pair<std::string, double>{"train/grad_norm", 0.5}));
  }
}

// A write that fails part way (a full disk; here the file-size limit, EFBIG) is cut back to the
// last whole record: the steps it failed on are missing, the file stays readable, and the
// writes after the disk has room again land. Before, the job dropped its writer at the first
// failure and logged nothing for the rest of the run.
TEST(TensorBoard, AFailedWriteLeavesAWholeFileAndLaterWritesLand) {
  const std::string dir = fresh("full_disk");
  auto w = TensorBoardWriter::open(dir, 0);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  log_steps(**w, 1, 2);
  const auto size = fs::file_size((*w)->path());
  struct sigaction ignore {}, old {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGXFSZ, &ignore, &old), 0);
  rlimit before {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &before), 0);
  rlimit small = before;
  small.rlim_cur = rlim_t(size + 20);  // room for part of the next record only
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const Status failed = (*w)->scalars(3, 1e9 + 3, {{"train/loss", 0.3}, {"train/grad_norm", 0.5}});
  const Status again = (*w)->scalars(4, 1e9 + 4, {{"train/loss", 0.25}, {"train/grad_norm", 0.5}});
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &before), 0);
  ASSERT_EQ(::sigaction(SIGXFSZ, &old, nullptr), 0);
  EXPECT_EQ(failed.code(), StatusCode::kResourceExhausted) << failed.to_string();
  EXPECT_FALSE(again.ok());
  EXPECT_EQ(fs::file_size((*w)->path()), size) << "cut back to the last whole record";
  log_steps(**w, 5, 6);
  EXPECT_EQ(steps_of((*w)->path()), (std::vector<long>{1, 2, 5, 6}));
}

TEST(TensorBoard, ATornLastRecordIsDroppedOnReopen) {
  const std::string dir = fresh("torn");
  const std::string path = run_logging(dir, 3);
  const auto whole = fs::file_size(path);
  for (uint64_t cut : {uint64_t(1), uint64_t(5), uint64_t(14)}) {  // inside the CRC, the data, the header
    fs::resize_file(path, whole - cut);
    EXPECT_EQ(steps_of(path), (std::vector<long>{1, 2})) << "cut " << cut << ": the reader stops at the torn record";
  }
  {
    auto w = TensorBoardWriter::open(dir, 100);
    ASSERT_TRUE(w.ok());
    log_steps(**w, 3, 4);
  }
  EXPECT_EQ(steps_of(path), (std::vector<long>{1, 2, 3, 4}));
  auto f = read_tensorboard_file(path);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->ends.back(), f->size) << "no torn bytes left inside the file";
}

TEST(TensorBoard, AResumedRunReplacesTheStepsAfterItsCheckpoint) {
  const std::string dir = fresh("resume");
  const std::string path = run_logging(dir, 5);  // killed after step 5; its last checkpoint was at step 3
  {
    auto w = TensorBoardWriter::open(dir, 3);
    ASSERT_TRUE(w.ok());
    EXPECT_EQ(steps_of(path), (std::vector<long>{1, 2, 3}));
    log_steps(**w, 4, 6);
  }
  EXPECT_EQ(steps_of(path), (std::vector<long>{1, 2, 3, 4, 5, 6}));
}

TEST(TensorBoard, ACorruptRecordEndsWhatIsKept) {
  const std::string dir = fresh("corrupt");
  const std::string path = run_logging(dir, 3);
  auto f = read_tensorboard_file(path);
  ASSERT_TRUE(f.ok());
  {  // flip a byte inside step 2's data
    std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(std::streamoff(f->ends[1] + 14));
    io.put('\x7f');
  }
  EXPECT_EQ(steps_of(path), (std::vector<long>{1}));
  auto w = TensorBoardWriter::open(dir, 100);
  ASSERT_TRUE(w.ok());
  log_steps(**w, 2, 2);
  EXPECT_EQ(steps_of(path), (std::vector<long>{1, 2}));
}

}  // namespace
}  // namespace mt

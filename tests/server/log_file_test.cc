// LogFile and LogCursor: lines round-trip, rotation bounds the disk and loses nothing for a reader
// that keeps up (even one that reads while the writer rotates), a reader left two rotations
// behind is told what it lost, tail N spans the rotated file, and a closed log ends its readers.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "server/log_file.h"
#include "tests/server/server_fixture.h"

namespace mt::server {
namespace {

std::vector<LogLine> read_all(LogCursor& c) {
  std::vector<LogLine> out;
  for (size_t before = SIZE_MAX; before != out.size();) {
    before = out.size();
    EXPECT_TRUE(c.read(out, 1024).ok());
  }
  return out;
}

TEST(LogFile, LinesRoundTripWithTimeAndLevel) {
  const std::string dir = testing::fresh_dir("log_roundtrip");
  auto log = LogFile::open(dir + "/log.txt", 0);
  ASSERT_TRUE(log.ok());
  (*log)->append_at(1796054701123, "info", "first");
  (*log)->append_at(1796054702000, "error", "two\nlines\r");
  (*log)->append_at(1796054703000, "warning", std::string(LogFile::kMaxLineBytes + 500, 'x'));
  (*log)->append_at(1796054704000, "info", "bad utf8 \xff\xfe end");
  auto c = LogCursor::open(*log, 0);
  ASSERT_TRUE(c.ok());
  auto lines = read_all(*c);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0].unix_ms, 1796054701123);
  EXPECT_EQ(lines[0].level, "info");
  EXPECT_EQ(lines[0].text, "first");
  EXPECT_EQ(lines[1].text, "two");
  EXPECT_EQ(lines[2].text, "lines");
  EXPECT_EQ(lines[2].level, "error");
  EXPECT_EQ(lines[3].text.size(), LogFile::kMaxLineBytes);  // cut, not split into a second line
  EXPECT_EQ(lines[4].text, "bad utf8 ?? end");
  EXPECT_FALSE(c->finished());  // open: a follower waits for more
  (*log)->close();
  (*log)->append("info", "after close");  // refused silently
  EXPECT_TRUE(read_all(*c).empty());
  EXPECT_TRUE(c->finished());
}

TEST(LogFile, RotationBoundsTheDiskAndAConcurrentReaderLosesNothing) {
  const std::string dir = testing::fresh_dir("log_rotate");
  const uint64_t cap = 4096;
  auto log = LogFile::open(dir + "/log.txt", cap);
  ASSERT_TRUE(log.ok());
  auto c = LogCursor::open(*log, 0);
  ASSERT_TRUE(c.ok());
  const int n = 5000;
  // The writer stays less than half a file (~40 lines of ~45 bytes) ahead of the reader: a
  // reader that keeps up, reading while the writer rotates under it.
  std::atomic<size_t> read_count{0};
  std::thread writer([&] {
    for (int i = 0; i < n; ++i) {
      while (size_t(i) > read_count.load() + 40) std::this_thread::yield();
      (*log)->append("info", "line " + std::to_string(i));
    }
    (*log)->close();
  });
  std::vector<LogLine> got;
  uint64_t max_disk = 0;
  while (!c->finished()) {
    ASSERT_TRUE(c->read(got, 512).ok());
    read_count = got.size();
    std::error_code ec;
    uint64_t disk = std::filesystem::file_size(dir + "/log.txt", ec);
    disk += std::filesystem::exists(dir + "/log.txt.1") ? std::filesystem::file_size(dir + "/log.txt.1", ec) : 0;
    max_disk = std::max(max_disk, disk);
  }
  writer.join();
  ASSERT_EQ(got.size(), size_t(n));
  for (int i = 0; i < n; ++i) ASSERT_EQ(got[size_t(i)].text, "line " + std::to_string(i)) << i;
  EXPECT_LE(max_disk, 2 * cap);
  EXPECT_TRUE(std::filesystem::exists(dir + "/log.txt.1"));
}

TEST(LogFile, AReaderTwoRotationsBehindIsToldWhatItLost) {
  const std::string dir = testing::fresh_dir("log_behind");
  auto log = LogFile::open(dir + "/log.txt", 1024);
  ASSERT_TRUE(log.ok());
  (*log)->append("info", "line 0");
  auto c = LogCursor::open(*log, 0);
  ASSERT_TRUE(c.ok());
  for (int i = 1; i < 400; ++i) (*log)->append("info", "line " + std::to_string(i));  // many rotations
  (*log)->close();
  auto lines = read_all(*c);
  // The reader's own file (gen 1) to its end, one warning, then contiguous lines to the last.
  size_t warn = 0;
  while (warn < lines.size() && lines[warn].level != "warning") ++warn;
  ASSERT_LT(warn, lines.size()) << "no warning line";
  EXPECT_NE(lines[warn].text.find("fell behind"), std::string::npos) << lines[warn].text;
  ASSERT_GT(warn, 0u);
  ASSERT_LT(warn + 1, lines.size());
  for (size_t i = 0; i < warn; ++i) EXPECT_EQ(lines[i].text, "line " + std::to_string(i));
  const int resume = std::stoi(lines[warn + 1].text.substr(5));
  EXPECT_GT(resume, int(warn));  // lines were lost between
  for (size_t i = warn + 1; i < lines.size(); ++i) EXPECT_EQ(lines[i].text, "line " + std::to_string(resume + int(i - warn - 1)));
  EXPECT_EQ(lines.back().text, "line 399");
  EXPECT_TRUE(c->finished());
}

TEST(LogFile, TailSpansTheRotatedFileAndNeverReadsMoreThanKept) {
  const std::string dir = testing::fresh_dir("log_tail");
  auto log = LogFile::open(dir + "/log.txt", 2048);
  ASSERT_TRUE(log.ok());
  for (int i = 0; i < 150; ++i) (*log)->append("info", "line " + std::to_string(i));
  auto all = LogCursor::open(*log, 0);
  ASSERT_TRUE(all.ok());
  const auto kept = read_all(*all);
  ASSERT_LT(kept.size(), 150u);  // rotation dropped the oldest
  ASSERT_GT(kept.size(), 50u);
  for (uint64_t tail : {uint64_t(1), uint64_t(7), uint64_t(kept.size() - 3), uint64_t(kept.size()), uint64_t(1) << 40}) {
    auto c = LogCursor::open(*log, tail);
    ASSERT_TRUE(c.ok());
    const auto lines = read_all(*c);
    const size_t want = std::min<uint64_t>(tail, kept.size());
    ASSERT_EQ(lines.size(), want) << "tail " << tail;
    EXPECT_EQ(lines.front().text, kept[kept.size() - want].text) << "tail " << tail;
    EXPECT_EQ(lines.back().text, "line 149");
  }
}

TEST(LogFile, ParsesLinesOfAnotherFormatAsText) {
  const LogLine l = parse_log_line("[2026-11-30 16:05:01.123] [job-000001] [info] old format");
  EXPECT_EQ(l.unix_ms, 0);
  EXPECT_EQ(l.text, "[2026-11-30 16:05:01.123] [job-000001] [info] old format");
  const LogLine m = parse_log_line("2026-11-30T16:05:01.123Z info new format");
  EXPECT_EQ(m.unix_ms, 1796054701123);
  EXPECT_EQ(m.text, "new format");
}

}  // namespace
}  // namespace mt::server

// LogFile and LogCursor: lines round-trip, rotation bounds the disk and loses nothing for a reader
// that keeps up (even one that reads while the writer rotates), a reader left two rotations
// behind is told what it lost, tail N spans the rotated file, and a closed log ends its readers.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

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

// A line that cannot be written (the path taken by a directory here; a full disk, a removed
// directory in use) was dropped without a word. Now the next line written says how many were lost
// and why.
TEST(LogFile, LinesThatCouldNotBeWrittenAreCountedInTheNextOne) {
  const std::string dir = testing::fresh_dir("log_lost");
  const std::string path = dir + "/log.txt";
  auto log = LogFile::open(path, 0);
  ASSERT_TRUE(log.ok());
  std::filesystem::remove(path);
  std::filesystem::create_directory(path);
  (*log)->append("info", "lost");
  (*log)->append("info", "lost\ntoo");
  std::filesystem::remove(path);
  (*log)->append_at(1796054701123, "info", "back");
  auto c = LogCursor::open(*log, 0);
  ASSERT_TRUE(c.ok());
  auto lines = read_all(*c);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].level, "warning");
  EXPECT_EQ(lines[0].unix_ms, 1796054701123);
  EXPECT_NE(lines[0].text.find("3 log line(s) before this one could not be written: cannot open '" + path + "'"),
            std::string::npos)
      << lines[0].text;
  EXPECT_EQ(lines[1].text, "back");
  (*log)->append("info", "then as before");
  EXPECT_EQ(read_all(*c).size(), 1u);
}

// A write cut short (the file size limit here; a full disk) is cut back to the last whole line:
// no torn line, and the next line says what was lost. In a child process, whose limit it sets.
TEST(LogFile, AShortWriteLeavesNoTornLine) {
  const std::string dir = testing::fresh_dir("log_short");
  const std::string path = dir + "/log.txt";
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);  // the write returns short instead of the signal killing it
    auto log = LogFile::open(path, 0);
    if (!log.ok()) ::_exit(2);
    (*log)->append("info", "before");
    const rlimit limit{rlim_t(std::filesystem::file_size(path) + 40), RLIM_INFINITY};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(3);
    (*log)->append("info", std::string(200, 'x'));
    const rlimit none{RLIM_INFINITY, RLIM_INFINITY};
    if (::setrlimit(RLIMIT_FSIZE, &none) != 0) ::_exit(4);
    (*log)->append("info", "after");
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  auto log = LogFile::open(path, 0, /*closed=*/true);
  ASSERT_TRUE(log.ok());
  auto c = LogCursor::open(*log, 0);
  ASSERT_TRUE(c.ok());
  auto lines = read_all(*c);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].text, "before");
  EXPECT_NE(lines[1].text.find("1 log line(s) before this one could not be written: cannot write '" + path +
                               "': wrote 40 of "),
            std::string::npos)
      << lines[1].text;
  EXPECT_EQ(lines[2].text, "after");
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

// The push spool: durable records, torn-tail recovery, exactly-once reads across seek.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include "server/push_spool.h"

namespace mt::server {
namespace {

std::string temp_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("mt_spool_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

// A full disk is named as such (not just "cannot spool"), and nothing of the chunk counts.
// /dev/full answers every write with ENOSPC, as a full filesystem does.
TEST(PushSpool, AFullDiskIsNamedAndTheChunkIsNotCounted) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  auto spool = PushSpool::open("/dev/full");
  ASSERT_TRUE(spool.ok()) << spool.status().to_string();
  const std::vector<uint32_t> tokens(64, 7);
  auto r = (*spool)->append(tokens.data(), tokens.size());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  const std::string m = r.status().message();
  EXPECT_NE(m.find("'/dev/full'"), std::string::npos) << m;
  EXPECT_NE(m.find("no space left on the state directory's filesystem"), std::string::npos) << m;
  EXPECT_NE(m.find("bytes free"), std::string::npos) << m;
  EXPECT_EQ((*spool)->tokens(), 0u);
}

TEST(PushSpool, ReadsEveryTokenOnceAndResumesFromCursor) {
  const std::string path = temp_dir("rw") + "/s.spool";
  auto spool = PushSpool::open(path);
  ASSERT_TRUE(spool.ok()) << spool.status().to_string();
  std::vector<uint32_t> all(1000);
  std::iota(all.begin(), all.end(), 0);
  for (auto& t : all) t %= 200;
  for (size_t i = 0; i < all.size(); i += 37)
    ASSERT_TRUE((*spool)->append(all.data() + i, std::min<size_t>(37, all.size() - i)).ok());
  EXPECT_EQ((*spool)->tokens(), 1000u);

  auto progress = std::make_shared<PushProgress>();
  auto src = make_push_source(*spool, 256, progress);
  ASSERT_TRUE(src.ok());
  Batch b;
  ASSERT_TRUE((*src)->next_batch(3, 9, b).ok());  // 30 tokens
  EXPECT_EQ(b.inputs[0], 0);
  EXPECT_EQ(b.targets[0], 1);
  EXPECT_EQ(b.inputs[9], 10);  // the second window starts after the first's 10 tokens
  ASSERT_TRUE((*src)->next_batch(3, 9, b).ok());
  EXPECT_EQ((*src)->cursor(), 60u);
  const uint64_t sum = progress->checksum;

  auto progress2 = std::make_shared<PushProgress>();
  auto src2 = make_push_source(*spool, 256, progress2);
  ASSERT_TRUE(src2.ok());
  ASSERT_TRUE((*src2)->seek(60).ok());
  EXPECT_EQ(progress2->checksum.load(), sum);
  ASSERT_TRUE((*src2)->next_batch(1, 4, b).ok());
  EXPECT_EQ(b.inputs[0], 60);
  EXPECT_FALSE((*src2)->seek(5000).ok());
}

TEST(PushSpool, TornTailIsTruncatedOnOpen) {
  const std::string path = temp_dir("torn") + "/s.spool";
  {
    auto spool = PushSpool::open(path);
    ASSERT_TRUE(spool.ok());
    std::vector<uint32_t> t(100, 7);
    ASSERT_TRUE((*spool)->append(t.data(), t.size()).ok());
    ASSERT_TRUE((*spool)->append(t.data(), t.size()).ok());
  }
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 10);  // a crash mid-append
  auto spool = PushSpool::open(path);
  ASSERT_TRUE(spool.ok());
  EXPECT_EQ((*spool)->tokens(), 100u);
  std::vector<uint32_t> t(5, 3);
  ASSERT_TRUE((*spool)->append(t.data(), t.size()).ok());
  spool->reset();
  auto again = PushSpool::open(path);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->tokens(), 105u);
}

TEST(PushSpool, StopWakesAWaitingReader) {
  auto spool = PushSpool::open(temp_dir("stop") + "/s.spool");
  ASSERT_TRUE(spool.ok());
  auto progress = std::make_shared<PushProgress>();
  auto src = make_push_source(*spool, 256, progress);
  ASSERT_TRUE(src.ok());
  std::thread stopper([&] {  // stops the reader once it says it waits (not after a guessed sleep)
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!progress->waiting.load() && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_TRUE(progress->waiting.load());
    (*spool)->stop();
  });
  Batch b;
  Status st = (*src)->next_batch(1, 8, b);
  stopper.join();
  EXPECT_EQ(st.code(), StatusCode::kCancelled);
}

// A spool of three 100-token records (tokens 0..299) and each record's byte offset.
std::vector<uint64_t> three_records(const std::string& path) {
  auto spool = PushSpool::open(path);
  EXPECT_TRUE(spool.ok());
  std::vector<uint64_t> at;
  for (uint32_t r = 0; r < 3; ++r) {
    at.push_back(std::filesystem::file_size(path));
    std::vector<uint32_t> t(100);
    std::iota(t.begin(), t.end(), r * 100);
    EXPECT_TRUE((*spool)->append(t.data(), t.size()).ok());
  }
  return at;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void flip_byte(const std::string& path, uint64_t off) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(std::streamoff(off));
  char c = 0;
  f.read(&c, 1);
  f.seekp(std::streamoff(off));
  c = char(c ^ 0x10);
  f.write(&c, 1);
}

// Opening must fail with DATA_LOSS naming `record` and its byte offset, and change nothing.
void expect_corrupt(const std::string& path, int record, uint64_t off, const std::string& what) {
  const std::string before = read_all(path);
  auto spool = PushSpool::open(path);
  ASSERT_FALSE(spool.ok());
  EXPECT_EQ(spool.status().code(), StatusCode::kDataLoss);
  const std::string msg = spool.status().message();
  EXPECT_NE(msg.find("record " + std::to_string(record) + " (byte " + std::to_string(off) + " "), std::string::npos)
      << msg;
  EXPECT_NE(msg.find(what), std::string::npos) << msg;
  EXPECT_EQ(read_all(path), before) << "the spool was modified";
}

// Issue 11 (4): one flipped byte in the middle used to truncate the spool there, silently.
TEST(PushSpool, CorruptMiddleRecordIsReportedAndNothingIsTruncated) {
  const std::string dir = temp_dir("corrupt_mid");
  const auto at = three_records(dir + "/payload.spool");
  flip_byte(dir + "/payload.spool", at[1] + 32 + 40);  // record 1's payload
  expect_corrupt(dir + "/payload.spool", 1, at[1], "payload checksum mismatch");
  expect_corrupt(dir + "/payload.spool", 1, at[1], "an intact record follows at byte " + std::to_string(at[2]));

  three_records(dir + "/header.spool");
  flip_byte(dir + "/header.spool", at[1] + 5);  // record 1's token count
  expect_corrupt(dir + "/header.spool", 1, at[1], "header checksum mismatch");
}

// A complete last record whose checksum fails is not what a crashed append leaves (that is a short
// record): it may be acknowledged data, so it is reported, not dropped.
TEST(PushSpool, CorruptCompleteLastRecordIsReportedAndNothingIsTruncated) {
  const std::string path = temp_dir("corrupt_last") + "/s.spool";
  const auto at = three_records(path);
  flip_byte(path, std::filesystem::file_size(path) - 1);
  expect_corrupt(path, 2, at[2], "no intact record follows");
}

// Only an incomplete last record is torn: a partial header, a header whose payload runs past the
// end, a zero-filled tail. Each is cut back to the intact records.
TEST(PushSpool, OnlyIncompleteTailsAreTruncated) {
  const std::string dir = temp_dir("tails");
  const auto at = three_records(dir + "/model.spool");
  const std::string intact = read_all(dir + "/model.spool");
  const std::string tails[] = {intact.substr(at[2], 20),           // header cut short
                               intact.substr(at[2], 32 + 100),     // payload cut short
                               std::string(64, '\0')};             // zero-filled
  for (const std::string& tail : tails) {
    const std::string path = dir + "/t.spool";
    std::ofstream(path, std::ios::binary | std::ios::trunc) << intact.substr(0, at[2]) << tail;
    auto spool = PushSpool::open(path);
    ASSERT_TRUE(spool.ok()) << spool.status().to_string();
    EXPECT_EQ((*spool)->tokens(), 200u);
    EXPECT_EQ(std::filesystem::file_size(path), at[2]);
  }
}

// Spools written before push positions (16-byte 'MTSP' headers) still open and read.
TEST(PushSpool, OldRecordFormatStillReads) {
  const std::string path = temp_dir("v1") + "/s.spool";
  std::vector<uint32_t> t(40);
  std::iota(t.begin(), t.end(), 0);
  uint32_t h[4] = {0x5053544d, 40, 0, 0};  // "MTSP", count, payload CRC, header CRC
  h[2] = uint32_t(crc32(0L, reinterpret_cast<const Bytef*>(t.data()), 160));
  h[3] = uint32_t(crc32(0L, reinterpret_cast<const Bytef*>(h), 12));
  {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(h), 16);
    f.write(reinterpret_cast<const char*>(t.data()), 160);
  }
  auto spool = PushSpool::open(path);
  ASSERT_TRUE(spool.ok()) << spool.status().to_string();
  ASSERT_TRUE((*spool)->append(t.data(), 26).ok());
  auto src = make_push_source(*spool, 256, std::make_shared<PushProgress>());
  ASSERT_TRUE(src.ok());
  Batch b;
  ASSERT_TRUE((*src)->next_batch(2, 32, b).ok());  // 66 tokens: across both record kinds
  EXPECT_EQ(b.inputs[0], 0);
  EXPECT_EQ(b.inputs[32 + 6], 39);  // window 1 is tokens 33..65: the old record's last token ...
  EXPECT_EQ(b.targets[32 + 6], 0);  // ... then the new record's first
}

// Issue 11 (12): a push id's tokens land once however the tries overlap, across a reopen.
TEST(PushSpool, PushPositionsSkipWhatThePushHolds) {
  const std::string path = temp_dir("pushat") + "/s.spool";
  std::vector<uint32_t> t(1000);
  std::iota(t.begin(), t.end(), 0);
  const uint64_t key = push_key("upload-1");
  {
    auto spool = PushSpool::open(path);
    ASSERT_TRUE(spool.ok());
    EXPECT_EQ(*(*spool)->append(t.data(), 300, {key, 0}), 300u);
    EXPECT_EQ(*(*spool)->append(t.data(), 300, {key, 0}), 300u);  // a retry from the start: nothing new
    EXPECT_EQ((*spool)->append(t.data() + 400, 100, {key, 400}).status().code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(*(*spool)->append(t.data() + 200, 300, {key, 200}), 500u);  // overlaps: 200 new
    EXPECT_EQ((*spool)->tokens(), 500u);
  }
  auto spool = PushSpool::open(path);
  ASSERT_TRUE(spool.ok());
  EXPECT_EQ((*spool)->committed(key), 500u);
  EXPECT_EQ((*spool)->committed(push_key("other")), 0u);
  EXPECT_EQ(*(*spool)->append(t.data() + 400, 600, {key, 400}), 1000u);
  EXPECT_EQ((*spool)->tokens(), 1000u);
  auto src = make_push_source(*spool, 1000, std::make_shared<PushProgress>());
  ASSERT_TRUE(src.ok());
  Batch b;
  ASSERT_TRUE((*src)->next_batch(1, 999, b).ok());
  for (int i = 0; i < 999; ++i) ASSERT_EQ(b.inputs[size_t(i)], i);
  EXPECT_EQ(b.targets[998], 999);
}

}  // namespace
}  // namespace mt::server

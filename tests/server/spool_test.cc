// The push spool: durable records, torn-tail recovery, exactly-once reads across seek.
#include <gtest/gtest.h>
#include <unistd.h>

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
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_TRUE(progress->waiting.load());
    (*spool)->stop();
  });
  Batch b;
  Status st = (*src)->next_batch(1, 8, b);
  stopper.join();
  EXPECT_EQ(st.code(), StatusCode::kCancelled);
}

}  // namespace
}  // namespace mt::server

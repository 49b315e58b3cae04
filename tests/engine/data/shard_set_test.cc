// Shard sets: a directory of token shards is read only as its manifest describes it. A run that
// did not finish (no manifest), a listed shard gone, a shard nobody listed, another run's shard
// under a listed name and a hostile manifest are each refused by name, never trained on.
#include "engine/data/shard_set.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine/base/json.h"
#include "engine/data/example_set.h"

#include "tests/engine/temp_dir.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

TokenizedExample example(int n, int seed) {
  TokenizedExample ex;
  for (int k = 0; k < n; ++k) ex.ids.push_back((seed * 31 + k * 7) % 256), ex.loss.push_back(k % 2);
  return ex;
}

// 12 examples of 10..21 tokens, a shard every 40 tokens or more.
void write_set(const std::string& dir, int seed = 0, bool finish = true) {
  auto w = ShardSetWriter::create(dir, 256, "byte", 40);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  for (int e = 0; e < 12; ++e) ASSERT_TRUE(w->add(example(10 + e, seed + e)).ok());
  if (finish) {
    ASSERT_TRUE(w->finish().ok());
  }
}

Status open_status(const std::string& dir) { return open_shard_example_set(dir, 256).status(); }

void expect_refused(const std::string& dir, const std::string& named) {
  const Status s = open_status(dir);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.to_string();
  EXPECT_NE(s.message().find(named), std::string::npos) << s.to_string();
}

std::string read_all(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(ShardSet, AFinishedSetReadsBackInOrderAndItsManifestCountsIt) {
  testing_util::TempDir d("mt-shardset");
  write_set(d.path);
  auto set = open_shard_example_set(d.path, 256);
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  ASSERT_EQ((*set)->size(), 12u);
  for (uint64_t e = 0; e < 12; ++e) {
    const TokenizedExample want = example(10 + int(e), int(e));
    ASSERT_EQ((*set)->length(e), want.ids.size());
    std::vector<int32_t> ids(want.ids.size());
    std::vector<uint8_t> loss(want.ids.size());
    ASSERT_TRUE((*set)->read(e, 0, ids.size(), ids.data(), loss.data()).ok());
    EXPECT_EQ(ids, want.ids) << "example " << e;
    EXPECT_EQ(loss, want.loss) << "example " << e;
  }
  auto m = Json::parse(read_all(d / "manifest.json"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->find("documents")->as_int(), 12);
  EXPECT_EQ(m->find("tokens")->as_int(), 12 * 10 + 66);
  EXPECT_EQ(m->find("tokenizer")->as_string(), "byte");
  EXPECT_GT(m->find("shards")->items().size(), 2u) << "a shard every 40 tokens";
  EXPECT_TRUE(fs::exists(d / "shard-00000.mts"));
}

TEST(ShardSet, ARunThatDidNotFinishIsRefusedAndCannotBeWrittenInto) {
  testing_util::TempDir d("mt-shardset");
  write_set(d.path, 0, /*finish=*/false);
  ASSERT_TRUE(fs::exists(d / "shard-00000.mts")) << "full shards were written as the run went";
  expect_refused(d.path, "no manifest.json");
  auto again = ShardSetWriter::create(d.path, 256, "byte", 40);
  EXPECT_EQ(again.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(again.status().message().find("did not finish"), std::string::npos) << again.status().to_string();
  testing_util::TempDir done("mt-shardset");
  write_set(done.path);
  EXPECT_EQ(ShardSetWriter::create(done.path, 256, "byte", 40).status().code(), StatusCode::kInvalidArgument);
}

TEST(ShardSet, AMissingOrUnlistedShardIsRefusedByName) {
  testing_util::TempDir d("mt-shardset");
  write_set(d.path);
  ASSERT_TRUE(open_status(d.path).ok());
  fs::rename(d / "shard-00001.mts", d / "stray.mts");
  expect_refused(d.path, "shard-00001.mts' is listed in manifest.json but missing");
  fs::rename(d / "stray.mts", d / "shard-00001.mts");
  ASSERT_TRUE(open_status(d.path).ok());
  fs::copy_file(d / "shard-00001.mts", d / "shard-00099.mts");
  expect_refused(d.path, "shard-00099.mts' is not listed");
}

TEST(ShardSet, AnotherRunsShardUnderAListedNameIsRefused) {
  testing_util::TempDir d("mt-shardset"), other("mt-shardset");
  write_set(d.path);
  write_set(other.path, /*seed=*/5);
  fs::copy_file(other / "shard-00000.mts", d / "shard-00000.mts", fs::copy_options::overwrite_existing);
  expect_refused(d.path, "shard-00000.mts' is not the shard manifest.json lists");
}

TEST(ShardSet, HostileManifestsAreRefusedNeverFollowed) {
  testing_util::TempDir d("mt-shardset");
  write_set(d.path);
  const std::string good = read_all(d / "manifest.json");
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) s.replace(at, from.size(), to);
    std::ofstream(d / "manifest.json", std::ios::trunc) << s;
    return open_status(d.path);
  };
  const std::pair<std::string, std::string> cases[] = {
      {"\"shard-00000.mts\"", "\"../shard-00000.mts\""},
      {"\"shard-00000.mts\"", "\"shard-00001.mts\""},  // listed twice
      {"\"shard-00000.mts\"", "\"shard-00000.txt\""},
      {"\"megatrain-token-shards\"", "\"something-else\""},
      {"\"version\": 1", "\"version\": 2"},
      {"\"checksum\": \"", "\"checksum\": \"zz"},
      {"\"bytes\": ", "\"bytes\": -"},
      {"{", "["},
  };
  for (const auto& [from, to] : cases) {
    const Status s = with(from, to);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << from << " -> " << to << ": " << s.to_string();
    EXPECT_NE(s.message().find("manifest.json"), std::string::npos) << s.to_string();
  }
  std::ofstream(d / "manifest.json", std::ios::trunc) << good;
  EXPECT_TRUE(open_status(d.path).ok());
}

}  // namespace
}  // namespace mt

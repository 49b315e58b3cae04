// Token shards: written and read back exactly (uint16 and uint32 ids, with and without a loss
// mask), and every malformed shard refused with an error naming the problem, never a crash.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "engine/base/hash.h"
#include "engine/data/example_set.h"
#include "engine/data/token_shard.h"

#include "tests/engine/temp_dir.h"

namespace mt {
namespace {

std::vector<TokenizedExample> examples(int vocab, bool all_trained) {
  std::vector<TokenizedExample> v;
  uint32_t x = 12345;
  for (size_t e = 0; e < 30; ++e) {
    TokenizedExample ex;
    for (size_t k = 0; k < 1 + e * 7 % 41; ++k) {
      x = x * 1103515245u + 12345u;
      ex.ids.push_back(int32_t(x % uint32_t(vocab)));
      ex.loss.push_back(all_trained || k % 3 == 2 ? 1 : 0);
    }
    v.push_back(ex);
  }
  return v;
}

std::string read_all(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void write_all(const std::string& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

// Rewrites the body checksum so a test reaches the structural checks behind it.
void fix_checksum(std::string& s) {
  const uint64_t h = fnv1a64(std::string_view(s).substr(64));
  std::memcpy(s.data() + 48, &h, 8);
}

void round_trip(int vocab, bool all_trained, uint32_t width) {
  testing_util::TempDir d("mt-shard");
  const auto ex = examples(vocab, all_trained);
  ShardWriter w(vocab);
  uint64_t tokens = 0;
  for (const auto& e : ex) {
    ASSERT_TRUE(w.add(e).ok());
    tokens += e.ids.size();
  }
  ASSERT_TRUE(w.write(d / "a.mts").ok());
  auto sh = TokenShard::open(d / "a.mts", vocab);
  ASSERT_TRUE(sh.ok()) << sh.status().to_string();
  EXPECT_EQ((*sh)->width(), width);
  EXPECT_EQ((*sh)->documents(), ex.size());
  EXPECT_EQ((*sh)->tokens(), tokens);
  auto set = open_shard_example_set(d / "a.mts", vocab);  // one file named directly (shard_set_test: directories)
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  EXPECT_NE((*set)->describe().find("tokenized for a vocabulary of " + std::to_string(vocab)), std::string::npos)
      << "the job's log says what the data was tokenized for: " << (*set)->describe();
  ASSERT_EQ((*set)->size(), ex.size());
  for (size_t e = 0; e < ex.size(); ++e) {
    const size_t n = ex[e].ids.size();
    ASSERT_EQ((*set)->length(e), n);
    std::vector<int32_t> ids(n);
    std::vector<uint8_t> loss(n);
    ASSERT_TRUE((*set)->read(e, 0, n, ids.data(), loss.data()).ok());
    EXPECT_EQ(ids, ex[e].ids);
    EXPECT_EQ(loss, ex[e].loss);
  }
}

TEST(SftShard, RoundTripUint16WithMask) { round_trip(50000, false, 2); }
TEST(SftShard, RoundTripUint32WithMask) { round_trip(151665, false, 4); }
TEST(SftShard, RoundTripWithoutMaskSection) {
  round_trip(256, true, 2);
  testing_util::TempDir d("mt-shard");
  ShardWriter a(256), b(256);
  for (const auto& e : examples(256, true)) ASSERT_TRUE(a.add(e).ok());
  for (const auto& e : examples(256, false)) ASSERT_TRUE(b.add(e).ok());
  ASSERT_TRUE(a.write(d / "a.mts").ok());
  ASSERT_TRUE(b.write(d / "b.mts").ok());
  EXPECT_LT(read_all(d / "a.mts").size(), read_all(d / "b.mts").size()) << "an all-ones mask is not stored";
}

TEST(SftShard, WriterRefusesEmptyAndOutOfVocabularyExamples) {
  ShardWriter w(256);
  EXPECT_FALSE(w.add(TokenizedExample{}).ok());
  EXPECT_FALSE(w.add(TokenizedExample{{300}, {1}}).ok());
  EXPECT_FALSE(w.add(TokenizedExample{{1, 2}, {1}}).ok());
}

class SftShardMalformed : public ::testing::Test {
 protected:
  void SetUp() override {
    ShardWriter w(1000);
    for (const auto& e : examples(1000, false)) ASSERT_TRUE(w.add(e).ok());
    ASSERT_TRUE(w.write(dir / "good.mts").ok());
    good = read_all(dir / "good.mts");
  }
  Status open(const std::string& bytes, int vocab = 1000) {
    write_all(dir / "bad.mts", bytes);
    auto s = TokenShard::open(dir / "bad.mts", vocab);
    return s.ok() ? Status::Ok() : s.status();
  }
  template <typename T>
  std::string with(size_t at, T v, bool checksum = true) {
    std::string s = good;
    std::memcpy(s.data() + at, &v, sizeof v);
    if (checksum) fix_checksum(s);
    return s;
  }
  testing_util::TempDir dir{"mt-shard"};
  std::string good;
};

TEST_F(SftShardMalformed, EveryTruncationIsRefused) {
  ASSERT_TRUE(open(good).ok());
  for (size_t n = 0; n < good.size(); n += (n < 80 ? 1 : 13)) {
    const Status s = open(good.substr(0, n));
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << "truncated to " << n << ": " << s.to_string();
  }
  EXPECT_EQ(open(good + std::string(8, '\0')).code(), StatusCode::kDataLoss) << "trailing bytes";
}

TEST_F(SftShardMalformed, HeaderLiesAreRefusedNaming) {
  auto expect = [&](const std::string& bytes, const std::string& words) {
    const Status s = open(bytes);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.to_string();
    EXPECT_NE(s.message().find(words), std::string::npos) << s.message();
  };
  expect(with<char>(0, 'X'), "magic");
  expect(with<uint32_t>(8, 2), "version");
  expect(with<uint32_t>(12, 3), "width");
  expect(with<uint32_t>(16, 6), "flags");
  expect(with<uint64_t>(24, 0), "vocabulary");
  expect(with<uint64_t>(24, 70000), "vocabulary");  // does not fit 2-byte ids
  expect(with<uint64_t>(32, uint64_t(1) << 62), "bounds");  // a huge token count: no allocation follows
  expect(with<uint64_t>(40, 100000), "bounds");
  expect(with<uint64_t>(32, 2000), "bytes");  // consistent bounds, wrong size
  expect(with<uint8_t>(70, uint8_t(good[70] ^ 1), false), "checksum");
}

TEST_F(SftShardMalformed, BadOffsetsAndMaskAreRefused) {
  uint64_t tokens, docs;
  std::memcpy(&tokens, good.data() + 32, 8);
  std::memcpy(&docs, good.data() + 40, 8);
  const size_t offsets_at = 64 + (tokens * 2 + 7) / 8 * 8;
  EXPECT_NE(open(with<uint64_t>(offsets_at, 1)).message().find("start at 0"), std::string::npos);
  EXPECT_NE(open(with<uint64_t>(offsets_at + 8 * 3, 0)).message().find("document 2"), std::string::npos);
  const size_t mask_at = offsets_at + (docs + 1) * 8;
  EXPECT_NE(open(with<uint8_t>(mask_at + 5, 2)).message().find("loss mask"), std::string::npos);
  EXPECT_EQ(open(good, 999).code(), StatusCode::kInvalidArgument) << "vocabulary larger than the model's";
}

TEST_F(SftShardMalformed, OutOfVocabularyIdsAreErrorsWhenRead) {
  std::string s = with<uint16_t>(64, 999);  // within the header's vocabulary: fine
  ASSERT_TRUE(open(s).ok());
  s = with<uint16_t>(64, 1000);              // beyond it
  write_all(dir / "bad.mts", s);
  auto set = open_shard_example_set(dir / "bad.mts", 1000);
  ASSERT_TRUE(set.ok());
  std::vector<int32_t> ids(64);
  std::vector<uint8_t> loss(64);
  const Status r = (*set)->read(0, 0, (*set)->length(0), ids.data(), loss.data());
  EXPECT_EQ(r.code(), StatusCode::kDataLoss);
  EXPECT_NE(r.message().find("1000"), std::string::npos) << r.message();
}

TEST(SftShard, DirectoryWithoutShardsIsNotFound) {
  testing_util::TempDir d("mt-shard");
  EXPECT_EQ(open_shard_example_set(d.path, 256).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(open_shard_example_set(d / "missing", 256).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace mt

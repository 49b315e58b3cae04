// A file truncated while it is mapped (someone with write access to the data root shrinks a token
// shard, a token file or a safetensors file under a running job): the reader gets an error naming
// the file, never SIGBUS, which would end the process and every job the daemon runs. A SIGBUS
// that no mapping explains still ends the process as it did before.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "engine/data/data_source.h"
#include "engine/data/example_set.h"
#include "engine/data/token_shard.h"
#include "engine/io/mapped_file.h"
#include "engine/io/safetensors.h"

#include "tests/engine/temp_dir.h"

namespace mt {
namespace {

namespace fs = std::filesystem;
const size_t kPage = size_t(::sysconf(_SC_PAGESIZE));

std::string write_bytes(const testing_util::TempDir& d, const std::string& name, const std::string& bytes) {
  std::ofstream(d / name, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  return d / name;
}

void expect_names_shrunk_file(const Status& s, const std::string& path) {
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.to_string();
  EXPECT_NE(s.message().find(path), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("changed while it was being read"), std::string::npos) << s.to_string();
}

TEST(TruncatedMapping, APageTheFileNoLongerHasReadsAsZerosAndTheMappingIsNotIntact) {
  testing_util::TempDir d("mt-trunc");
  const std::string path = write_bytes(d, "f", std::string(4 * kPage, '\xab'));
  auto m = MappedFile::open(path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const volatile uint8_t* p = (*m)->data();
  EXPECT_EQ(p[0], 0xab);
  EXPECT_EQ(p[3 * kPage], 0xab);
  EXPECT_TRUE((*m)->intact().ok());
  fs::resize_file(path, kPage + 10);
  EXPECT_EQ(p[kPage + 5], 0xab) << "a page the file still has keeps its bytes";
  EXPECT_EQ(p[3 * kPage + 7], 0) << "past the new end: zeros, not SIGBUS";
  EXPECT_EQ(p[2 * kPage], 0);
  expect_names_shrunk_file((*m)->intact(), path);

  // Asked before any read reached the lost pages, intact() already knows: it probes the last page.
  const std::string q = write_bytes(d, "g", std::string(4 * kPage, '\xab'));
  auto n = MappedFile::open(q);
  ASSERT_TRUE(n.ok());
  fs::resize_file(q, 2 * kPage);
  expect_names_shrunk_file((*n)->intact(), q);
}

// Cut within its last page, a file raises no SIGBUS (the kernel zeros the page's tail): intact()
// still says so when nonzero bytes were cut, and not when only zeros were (what was read is right).
TEST(TruncatedMapping, AFileCutWithinItsLastPageIsFoundWithoutAFault) {
  testing_util::TempDir d("mt-trunc");
  const std::string path = write_bytes(d, "f", std::string(kPage + 100, '\x01'));
  auto m = MappedFile::open(path);
  ASSERT_TRUE(m.ok());
  fs::resize_file(path, kPage + 50);
  EXPECT_EQ((*m)->data()[kPage + 60], 0);
  expect_names_shrunk_file((*m)->intact(), path);

  const std::string zeros = write_bytes(d, "z", std::string(kPage + 20, '\x01') + std::string(80, '\0'));
  auto z = MappedFile::open(zeros);
  ASSERT_TRUE(z.ok());
  fs::resize_file(zeros, kPage + 30);
  EXPECT_EQ((*z)->data()[kPage + 60], 0);
  EXPECT_TRUE((*z)->intact().ok()) << "only zeros were cut: every byte read is the file's";
}

TEST(TruncatedMapping, OnlyTheShrunkFilesMappingIsTorn) {
  testing_util::TempDir d("mt-trunc");
  const std::string a = write_bytes(d, "a", std::string(3 * kPage, 'a'));
  const std::string b = write_bytes(d, "b", std::string(3 * kPage, 'b'));
  auto ma = MappedFile::open(a), mb = MappedFile::open(b);
  ASSERT_TRUE(ma.ok() && mb.ok());
  fs::resize_file(a, 0);
  const volatile uint8_t* pa = (*ma)->data();
  const volatile uint8_t* pb = (*mb)->data();
  EXPECT_EQ(pa[2 * kPage], 0);
  EXPECT_EQ(pb[2 * kPage], 'b');
  EXPECT_FALSE((*ma)->intact().ok());
  EXPECT_TRUE((*mb)->intact().ok());
}

// Slots are given back when a mapping closes: more opens than kMaxMappings, one at a time.
TEST(TruncatedMapping, ClosedMappingsGiveTheirWatchBack) {
  testing_util::TempDir d("mt-trunc");
  const std::string path = write_bytes(d, "f", "xyz");
  for (size_t i = 0; i < MappedFile::kMaxMappings + 100; ++i) {
    auto m = MappedFile::open(path);
    ASSERT_TRUE(m.ok()) << i << ": " << m.status().to_string();
  }
}

// A SIGBUS no watched mapping explains (here a mapping made without MappedFile) ends the process
// by SIGBUS, as it would without the handler.
TEST(TruncatedMappingDeathTest, AFaultOutsideEveryWatchedMappingStillEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  testing_util::TempDir d("mt-trunc");
  const std::string watched = write_bytes(d, "w", std::string(kPage, 'w'));
  const std::string raw = write_bytes(d, "r", std::string(3 * kPage, 'r'));
  auto m = MappedFile::open(watched);  // installs the handler
  ASSERT_TRUE(m.ok());
  EXPECT_EXIT(
      {
        const int fd = ::open(raw.c_str(), O_RDONLY);
        auto* p = static_cast<volatile uint8_t*>(::mmap(nullptr, 3 * kPage, PROT_READ, MAP_PRIVATE, fd, 0));
        if (::ftruncate(::open(raw.c_str(), O_WRONLY), 0) != 0) std::_Exit(5);
        const uint8_t v = p[2 * kPage];
        std::_Exit(v == 0 ? 3 : 4);  // read on as if nothing happened: the handler swallowed the fault
      },
      [](int status) {
#if defined(__SANITIZE_ADDRESS__)  // ASan's handler, installed before ours, reports it and exits or aborts
        return WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) < 3);
#else
        return WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS;
#endif
      },
      "");
}

// Token shards: a batch read across the cut fails naming the shard, and document bounds read as
// zeros never send the reader outside the mapping.
TEST(TruncatedMapping, ATokenShardShrunkUnderAReaderFailsItNamingTheShard) {
  testing_util::TempDir d("mt-trunc");
  ShardWriter w(1000);
  for (int doc = 0; doc < 40; ++doc) {
    TokenizedExample ex;
    for (int i = 0; i < 1000 + doc; ++i) ex.ids.push_back((doc * 31 + i) % 1000), ex.loss.push_back(1);
    ASSERT_TRUE(w.add(ex).ok());
  }
  const std::string path = d / "a.mts";
  ASSERT_TRUE(w.write(path).ok());
  auto set = open_shard_example_set(path, 1000);
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  std::vector<int32_t> ids(2000);
  std::vector<uint8_t> loss(2000);
  ASSERT_TRUE((*set)->read(0, 0, 1000, ids.data(), loss.data()).ok());
  // The document bounds lie at the file's end, past the cut: the first length() tears the mapping
  // and every read fails from then on, even of documents whose tokens lie before the cut.
  fs::resize_file(path, 2 * kPage);
  for (uint64_t i = 0; i < (*set)->size(); ++i) {
    const uint64_t n = (*set)->length(i);
    ASSERT_GE(n, 1u);
    ids.resize(std::max<size_t>(ids.size(), n)), loss.resize(std::max<size_t>(loss.size(), n));
    expect_names_shrunk_file((*set)->read(i, 0, n, ids.data(), loss.data()), path);
  }
  // Opened after the cut: refused by its size, as before.
  auto again = TokenShard::open(path, 1000);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("truncated or corrupt"), std::string::npos) << again.status().to_string();
}

TEST(TruncatedMapping, ATokenFileShrunkUnderADataSourceFailsTheBatchAndKeepsTheCursor) {
  testing_util::TempDir d("mt-trunc");
  std::vector<uint16_t> tokens(8 * kPage);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint16_t(i % 500);
  const std::string path =
      write_bytes(d, "t.bin", std::string(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2));
  auto src = make_token_file_source(path, "uint16", 500);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  Batch b;
  ASSERT_TRUE((*src)->next_batch(2, 256, b).ok());
  fs::resize_file(path, kPage);  // 2,048 tokens left: 8 windows
  Status s;
  uint64_t before = 0;
  int batches = 0;
  for (; batches < 40 && s.ok(); ++batches) {
    before = (*src)->cursor();
    s = (*src)->next_batch(4, 256, b);
  }
  expect_names_shrunk_file(s, path);
  EXPECT_EQ(batches, 1) << "windows 2..5 lie before the cut, but the file is not the one opened";
  EXPECT_EQ((*src)->cursor(), before) << "a failed batch leaves the cursor where it was";
  EXPECT_FALSE((*src)->next_batch(1, 256, b).ok()) << "a torn file stays torn";
}

TEST(TruncatedMapping, ASafetensorsFileShrunkUnderAReaderFailsTheTensorsRead) {
  testing_util::TempDir d("mt-trunc");
  std::vector<float> a(4 * kPage, 1.5f);
  std::vector<uint16_t> h(4 * kPage, 0x3fc0);
  const std::string path = d / "m.safetensors";
  ASSERT_TRUE(write_safetensors(path, {{"a", {int64_t(a.size())}, DType::kF32, a.data(), DType::kF32},
                                       {"h", {int64_t(h.size())}, DType::kBF16, h.data(), DType::kBF16}})
                  .ok());
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  std::vector<float> out(a.size());
  ASSERT_TRUE((*f)->read_f32(*(*f)->find("a"), out.data()).ok());
  EXPECT_EQ(out[100], 1.5f);
  fs::resize_file(path, 2 * kPage);
  expect_names_shrunk_file((*f)->read_f32(*(*f)->find("h"), out.data()), path);
  std::vector<bf16> half(h.size());
  expect_names_shrunk_file((*f)->read_bf16(*(*f)->find("h"), half.data()), path);
}

}  // namespace
}  // namespace mt

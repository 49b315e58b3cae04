// Token files: raw uint16/uint32 and llm.c shards; windows, cursor, wrap and every error case.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/data/data_source.h"

#include "tests/engine/temp_dir.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

struct TempDir : testing_util::TempDir {
  TempDir() : testing_util::TempDir("mt-tok") {}
};

template <typename T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

std::string write(const TempDir& d, const std::string& name, const std::string& bytes) {
  std::ofstream(d / name, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  return d / name;
}

std::string llmc_file(int32_t magic, int32_t version, int32_t count, const std::string& tokens) {
  std::vector<int32_t> h(256, 0);
  h[0] = magic, h[1] = version, h[2] = count;
  return bytes_of(h) + tokens;
}

template <typename T>
std::vector<T> iota(size_t n, T mod) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = T(i % size_t(mod));
  return v;
}

// Checks that a batch holds windows `first`, `first`+1, ... of stride T over tokens i % mod.
void expect_windows(const Batch& b, uint64_t first, uint64_t windows, int mod) {
  for (int g = 0; g < b.num_seqs; ++g) {
    const uint64_t start = ((first + uint64_t(g)) % windows) * uint64_t(b.seq_len);
    for (int t = 0; t < b.seq_len; ++t) {
      ASSERT_EQ(b.inputs[size_t(g * b.seq_len + t)], int32_t((start + uint64_t(t)) % uint64_t(mod)));
      ASSERT_EQ(b.targets[size_t(g * b.seq_len + t)], int32_t((start + uint64_t(t) + 1) % uint64_t(mod)));
    }
  }
}

TEST(TokenFile, Uint16WindowsCursorAndWrap) {
  TempDir d;
  const std::string path = write(d, "train.bin", bytes_of(iota<uint16_t>(101, 1000)));
  auto src = make_token_file_source(path, "uint16", 1000);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  EXPECT_NE((*src)->describe().find("101 tokens"), std::string::npos);
  EXPECT_EQ((*src)->num_sequences(10), 10u);
  Batch b;
  ASSERT_TRUE((*src)->next_batch(3, 10, b).ok());  // 10 windows of 10 (+1) tokens
  expect_windows(b, 0, 10, 1000);
  EXPECT_EQ((*src)->cursor(), 3u);
  ASSERT_TRUE((*src)->seek(8).ok());
  ASSERT_TRUE((*src)->next_batch(4, 10, b).ok());  // wraps: windows 8, 9, 0, 1
  expect_windows(b, 8, 10, 1000);
  EXPECT_EQ((*src)->cursor(), 12u);
  EXPECT_FALSE((*src)->next_batch(1, 101, b).ok());  // needs seq_len + 1 tokens
}

TEST(TokenFile, Uint32AndLlmc) {
  TempDir d;
  auto src = make_token_file_source(write(d, "a.bin", bytes_of(iota<uint32_t>(50, 70000))), "uint32", 100000);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  Batch b;
  ASSERT_TRUE((*src)->next_batch(2, 7, b).ok());
  expect_windows(b, 0, 7, 70000);
  auto l1 = make_token_file_source(write(d, "s1.bin", llmc_file(20240520, 1, 64, bytes_of(iota<uint16_t>(64, 50)))),
                                   "llmc", 50);
  ASSERT_TRUE(l1.ok()) << l1.status().to_string();
  ASSERT_TRUE((*l1)->next_batch(5, 9, b).ok());
  expect_windows(b, 0, 7, 50);
  auto l2 = make_token_file_source(write(d, "s2.bin", llmc_file(20240520, 2, 64, bytes_of(iota<uint32_t>(64, 50)))),
                                   "llmc", 50);
  ASSERT_TRUE(l2.ok()) << l2.status().to_string();
  ASSERT_TRUE((*l2)->next_batch(5, 9, b).ok());
  expect_windows(b, 0, 7, 50);
}

void expect_error(const Result<std::unique_ptr<DataSource>>& r, const std::vector<std::string>& parts) {
  ASSERT_FALSE(r.ok());
  for (const auto& p : parts) EXPECT_NE(r.status().message().find(p), std::string::npos) << r.status().message();
}

TEST(TokenFile, RejectsEmptyOddAndBadDtype) {
  TempDir d;
  expect_error(make_token_file_source(write(d, "empty.bin", ""), "uint16", 100), {"empty.bin", "empty"});
  expect_error(make_token_file_source(write(d, "odd.bin", "abc"), "uint16", 100), {"odd.bin", "3 bytes"});
  expect_error(make_token_file_source(write(d, "six.bin", "abcdef"), "uint32", 100), {"six.bin", "6 bytes"});
  expect_error(make_token_file_source(d / "missing.bin", "uint16", 100), {"missing.bin"});
  expect_error(make_token_file_source(write(d, "x.bin", "ab"), "int8", 100), {"int8"});
  expect_error(make_token_file_source(write(d, "y.bin", "ab"), "uint16", 0), {"vocab"});
}

TEST(TokenFile, RejectsTokenOutsideVocab) {
  TempDir d;
  auto toks = iota<uint16_t>(40, 30);
  toks[17] = 300;
  expect_error(make_token_file_source(write(d, "v.bin", bytes_of(toks)), "uint16", 256),
               {"v.bin", "token 17", "value 300", "256"});
}

// A file that passed the scan at open and was then rewritten in place (same size, so nothing
// faults): the batch that reads the new out-of-vocabulary id fails naming it, instead of handing
// the embedding an index outside its table; the cursor stays.
TEST(TokenFile, AnIdRewrittenOutsideTheVocabAfterOpenFailsTheBatchThatReadsIt) {
  TempDir d;
  auto toks = iota<uint16_t>(41, 30);
  const std::string path = write(d, "w.bin", bytes_of(toks));
  auto src = make_token_file_source(path, "uint16", 256);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  Batch b;
  ASSERT_TRUE((*src)->next_batch(1, 10, b).ok());
  toks[25] = 300;
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.write(bytes_of(toks).data(), std::streamsize(toks.size() * 2));
  }
  ASSERT_TRUE((*src)->next_batch(1, 10, b).ok()) << "window 1 (tokens 10..20) is unchanged";
  const Status s = (*src)->next_batch(1, 10, b);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("token 25 has value 300"), std::string::npos) << s.to_string();
  EXPECT_EQ((*src)->cursor(), 2u);
}

TEST(TokenFile, RejectsBadLlmcHeader) {
  TempDir d;
  const std::string toks = bytes_of(iota<uint16_t>(10, 10));
  expect_error(make_token_file_source(write(d, "m.bin", llmc_file(12345, 1, 10, toks)), "llmc", 50),
               {"m.bin", "bad magic 12345"});
  expect_error(make_token_file_source(write(d, "v.bin", llmc_file(20240520, 7, 10, toks)), "llmc", 50),
               {"unsupported version 7"});
  expect_error(make_token_file_source(write(d, "c.bin", llmc_file(20240520, 1, 11, toks)), "llmc", 50),
               {"c.bin", "11 tokens", "1044 bytes"});
  expect_error(make_token_file_source(write(d, "n.bin", llmc_file(20240520, 1, -1, toks)), "llmc", 50),
               {"not positive"});
  expect_error(make_token_file_source(write(d, "h.bin", std::string(100, '\0')), "llmc", 50), {"h.bin", "100 bytes"});
}

// A text file is mapped, not read into memory (the plan does not count it): its windows are its
// bytes, and a file cut under a run fails the batch that read past its new end (DATA_LOSS), never
// trains on the zeros read there.
TEST(TextFile, WindowsAreTheMappedBytesAndACutFileFailsTheBatch) {
  TempDir d;
  std::string text;
  for (int i = 0; i < 4096; ++i) text.push_back(char('a' + i % 26));
  const std::string path = write(d, "t.txt", text);
  auto src = make_text_source(path, 256);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  EXPECT_EQ((*src)->num_sequences(64), 63u);
  Batch b;
  ASSERT_TRUE((*src)->next_batch(2, 64, b).ok());
  EXPECT_EQ(b.inputs[64], int32_t(text[64]));
  EXPECT_EQ(b.targets[127], int32_t(text[128]));
  fs::resize_file(path, 100);
  ASSERT_TRUE((*src)->seek(60).ok());  // windows past the new end
  EXPECT_EQ((*src)->next_batch(2, 64, b).code(), StatusCode::kDataLoss);
}

// A data path that is no regular file is refused naming what it is, at once: a FIFO held the run
// in open() until a writer came (one SIGTERM did not end it), /dev/zero was read until memory ran out.
TEST(DataFiles, AFifoOrADeviceIsRefusedByName) {
  TempDir d;
  const std::string fifo = d / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_error(make_text_source(fifo, 256), {"fifo", "a FIFO, not a regular file"});
  expect_error(make_token_file_source(fifo, "uint16", 256), {"fifo", "a FIFO, not a regular file"});
  expect_error(make_text_source("/dev/zero", 256), {"/dev/zero", "a character device, not a regular file"});
  expect_error(make_token_file_source("/dev/zero", "uint16", 256), {"/dev/zero", "a character device"});
  expect_error(make_text_source(d.path, 256), {"a directory, not a regular file"});
}

}  // namespace
}  // namespace mt

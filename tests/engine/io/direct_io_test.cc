// The parallel aligned file I/O (direct_io.h) and safetensors through it: files of every size
// around the block and chunk boundaries (the page-cache tail), byte-identical to the streaming
// writer (F32, BF16, conversions both ways, elements split by chunks and at unaligned offsets),
// reads equal to read_f32 / read_bf16, a header padded to a block, an O_DIRECT refusal.
#include "engine/io/direct_io.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <random>

#include "engine/base/json.h"
#include "engine/io/safetensors_parallel.h"

#include "tests/engine/temp_dir.h"

namespace mt {
namespace {

struct TempDir : testing_util::TempDir {
  TempDir() : testing_util::TempDir("mt-dio") {}
};

struct FaultsReset {  // every test leaves no fault behind
  ~FaultsReset() { set_io_faults_for_testing({}); }
};

char pattern(uint64_t i) { return char((i * 2654435761u) >> 13); }

// Small chunks: a file of a few KiB crosses many pieces, threads and block boundaries.
std::vector<FileIoOptions> small_chunk_options() {
  return {{FileIoMode::kDirect, 3, kDirectIoAlign}, {FileIoMode::kDirect, 4, 2 * kDirectIoAlign},
          {FileIoMode::kBuffered, 3, kDirectIoAlign}, {FileIoMode::kDirect, 1, size_t(16) << 20}};
}

TEST(DirectIo, WritesEverySizeAroundBlocksAndChunks) {
  TempDir tmp;
  auto dir = DirFd::open(tmp.path, false);
  ASSERT_TRUE(dir.ok());
  const FillBytes fill = [](uint64_t off, size_t n, char* dst) {
    for (size_t i = 0; i < n; ++i) dst[i] = pattern(off + i);
  };
  for (const FileIoOptions& o : small_chunk_options())
    for (uint64_t size : {0, 1, 4095, 4096, 4097, 8191, 3 * 8192, 3 * 8192 + 5, 100000}) {
      FileIoReport r;
      ASSERT_TRUE(write_file_parallel(*dir, "f.bin", size, fill, o, &r).ok()) << size;
      auto bytes = read_file(tmp / "f.bin");
      ASSERT_TRUE(bytes.ok());
      ASSERT_EQ(bytes->size(), size);
      for (uint64_t i = 0; i < size; ++i) ASSERT_EQ((*bytes)[i], pattern(i)) << "byte " << i << " of " << size;
      EXPECT_EQ(r.direct, o.mode == FileIoMode::kDirect) << r.fallback;
    }
}

TEST(DirectIo, ReadsPiecesAtAnyOffsetUpToTheEndOfTheFile) {
  TempDir tmp;
  std::string a(50001, '\0'), b(4096 * 3, '\0');
  for (size_t i = 0; i < a.size(); ++i) a[i] = pattern(i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = pattern(i + 7);
  std::ofstream(tmp / "a.bin", std::ios::binary).write(a.data(), std::streamsize(a.size()));
  std::ofstream(tmp / "b.bin", std::ios::binary).write(b.data(), std::streamsize(b.size()));
  // Adjacent, with gaps, unaligned, to the last byte, empty, in no order.
  const std::vector<std::pair<size_t, std::pair<uint64_t, uint64_t>>> want = {
      {0, {13, 4000}}, {0, {4013, 9000}}, {0, {30000, 20001}}, {1, {0, 4096 * 3}}, {0, {0, 13}}, {0, {20000, 0}}};
  for (const FileIoOptions& o : small_chunk_options()) {
    std::vector<std::string> out;
    std::vector<ReadPiece> pieces;
    for (const auto& [file, range] : want) out.emplace_back(range.second, '\0');
    for (size_t k = 0; k < want.size(); ++k)
      pieces.push_back({want[k].first, want[k].second.first, want[k].second.second, out[k].data()});
    ASSERT_TRUE(read_pieces_parallel({tmp / "a.bin", tmp / "b.bin"}, pieces, o).ok());
    for (size_t k = 0; k < want.size(); ++k)
      EXPECT_EQ(out[k], (want[k].first == 0 ? a : b).substr(want[k].second.first, want[k].second.second)) << k;
  }
  char x;
  EXPECT_EQ(read_pieces_parallel({tmp / "a.bin"}, {{0, 50000, 2, &x}}, {}).code(), StatusCode::kInvalidArgument);
}

// Tensors that exercise every path of the piecewise writer: F32 and BF16 copied, converted
// both ways, an odd-length BF16 tensor that leaves the next F32 tensor at an address 2 mod 4,
// one element, and an empty tensor.
struct Tensors {
  std::vector<float> f32 = std::vector<float>(12345);
  std::vector<bf16> b16 = std::vector<bf16>(5001);
  std::vector<WriteTensor> list;
  Tensors() {
    std::mt19937 rng(3);
    std::normal_distribution<float> d(0.f, 1.f);
    for (auto& v : f32) v = d(rng);
    for (auto& v : b16) v = float_to_bf16(d(rng));
    list = {{"a.f32", {15, 823}, DType::kF32, f32.data(), DType::kF32},
            {"b.bf16_odd", {5001}, DType::kBF16, b16.data(), DType::kBF16},
            {"c.f32_after_odd", {12345}, DType::kF32, f32.data(), DType::kF32},
            {"d.f32_to_bf16", {3, 4115}, DType::kBF16, f32.data(), DType::kF32},
            {"e.bf16_odd", {3}, DType::kBF16, b16.data(), DType::kBF16},
            {"f.bf16_to_f32", {5001}, DType::kF32, b16.data(), DType::kBF16},
            {"g.one", {1}, DType::kF32, f32.data() + 7, DType::kF32},
            {"h.empty", {0, 4}, DType::kF32, nullptr, DType::kF32}};
  }
};

TEST(DirectIo, SafetensorsBytesEqualTheStreamingWriters) {
  TempDir tmp;
  auto dir = DirFd::open(tmp.path, false);
  ASSERT_TRUE(dir.ok());
  const Tensors t;
  const Metadata meta = {{"format", "pt"}, {"step", "9"}};
  ASSERT_TRUE(write_safetensors(*dir, "stream.safetensors", t.list, meta).ok());
  const auto want = read_file(tmp / "stream.safetensors");
  ASSERT_TRUE(want.ok());
  ASSERT_NE(want->size() % kDirectIoAlign, 0u);  // a tail through the page cache
  for (const FileIoOptions& o : small_chunk_options()) {
    FileIoReport r;
    ASSERT_TRUE(write_safetensors_parallel(*dir, "p.safetensors", t.list, meta, o, &r).ok());
    EXPECT_EQ(*read_file(tmp / "p.safetensors"), *want) << file_io_mode_name(o.mode) << " " << o.chunk_bytes;
  }
  auto f = SafetensorsFile::open(tmp / "p.safetensors");  // and read back by the mapping reader
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  std::vector<float> c(12345);
  ASSERT_TRUE((*f)->read_f32(*(*f)->find("c.f32_after_odd"), c.data()).ok());
  EXPECT_EQ(std::memcmp(c.data(), t.f32.data(), c.size() * 4), 0);
}

// Every tensor read by read_tensors_parallel as F32 and as BF16 equals read_f32 / read_bf16.
TEST(DirectIo, ReadTensorsEqualsTheMappingReader) {
  TempDir tmp;
  auto dir = DirFd::open(tmp.path, false);
  ASSERT_TRUE(dir.ok());
  const Tensors t;
  FileIoReport written;
  ASSERT_TRUE(write_safetensors_parallel(*dir, "x.safetensors", t.list, {}, {}, &written).ok());
  // Opened through a symlink (as a Hugging Face cache's snapshots/ files are): the O_DIRECT
  // descriptor is the opened file again, not its path looked up again (which refused the link).
  std::filesystem::create_symlink(tmp / "x.safetensors", tmp / "link.safetensors");
  auto f = SafetensorsFile::open(tmp / "link.safetensors");
  ASSERT_TRUE(f.ok());
  for (const FileIoOptions& o : small_chunk_options())
    for (DType as : {DType::kF32, DType::kBF16}) {
      const size_t es = dtype_size(as);
      std::vector<std::string> got, want;
      std::vector<ReadTensor> reads;
      for (const TensorInfo& info : (*f)->tensors()) {
        got.emplace_back(info.numel() * es, '\x5a');
        want.emplace_back(info.numel() * es, '\x5a');
        reads.push_back({f->get(), &info, got.back().data(), as});
        if (as == DType::kF32) ASSERT_TRUE((*f)->read_f32(info, reinterpret_cast<float*>(want.back().data())).ok());
        else ASSERT_TRUE((*f)->read_bf16(info, reinterpret_cast<bf16*>(want.back().data())).ok());
      }
      FileIoReport r;
      ASSERT_TRUE(read_tensors_parallel(reads, o, &r).ok());
      // Where this filesystem takes O_DIRECT, the reads' descriptor (the same file opened again
      // through /proc/self/fd) takes it too.
      if (written.direct && o.mode == FileIoMode::kDirect) {
        EXPECT_TRUE(r.direct) << r.fallback;
      }
      for (size_t k = 0; k < got.size(); ++k) EXPECT_EQ(got[k], want[k]) << (*f)->tensors()[k].name << " " << dtype_name(as);
    }
}

// The format lets the header JSON end in spaces; one padded so the data starts at a block
// boundary (as an aligned writer might) parses, and its tensors read the same.
TEST(DirectIo, HeaderPaddedToABlockParses) {
  TempDir tmp;
  const Tensors t;
  auto header = safetensors_header(t.list, {{"format", "pt"}});
  ASSERT_TRUE(header.ok());
  std::string json = header->substr(8);
  json.append((kDirectIoAlign - (8 + json.size()) % kDirectIoAlign) % kDirectIoAlign, ' ');
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((uint64_t(json.size()) >> (8 * i)) & 0xff);
  auto dir = DirFd::open(tmp.path, false);
  ASSERT_TRUE(write_safetensors(*dir, "x.safetensors", t.list, {{"format", "pt"}}).ok());
  const std::string file = *read_file(tmp / "x.safetensors");
  bytes += json + file.substr(header->size());
  ASSERT_TRUE(write_file_durable(tmp / "padded.safetensors", bytes).ok());
  auto f = SafetensorsFile::open(tmp / "padded.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->header().data_start, kDirectIoAlign);
  std::vector<float> a(t.f32.size());
  ASSERT_TRUE((*f)->read_f32(*(*f)->find("c.f32_after_odd"), a.data()).ok());
  EXPECT_EQ(std::memcmp(a.data(), t.f32.data(), t.f32.size() * 4), 0);
  EXPECT_EQ((*f)->header().metadata.at("format"), "pt");
}

TEST(DirectIo, RefusedDirectFallsBackToThePageCacheAndSaysSoOnce) {
  FaultsReset reset;
  TempDir tmp;
  auto dir = DirFd::open(tmp.path, false);
  ASSERT_TRUE(dir.ok());
  set_io_faults_for_testing({EINVAL, nullptr});
  const Tensors t;
  const FileIoCounters before = file_io_counters();
  FileIoReport r;
  ASSERT_TRUE(write_safetensors_parallel(*dir, "x.safetensors", t.list, {}, {}, &r).ok());
  EXPECT_FALSE(r.direct);
  EXPECT_NE(r.fallback.find("Invalid argument"), std::string::npos) << r.fallback;
  EXPECT_EQ(file_io_counters().buffered, before.buffered + 1);
  const std::string notice = take_direct_io_notice();
  EXPECT_NE(notice.find(tmp / "x.safetensors"), std::string::npos) << notice;
  EXPECT_EQ(take_direct_io_notice(), "");  // once
  ASSERT_TRUE(write_safetensors(*dir, "y.safetensors", t.list).ok());
  EXPECT_EQ(*read_file(tmp / "x.safetensors"), *read_file(tmp / "y.safetensors"));
}

TEST(DirectIo, InjectedWriteErrorNamesTheFileAndRemovesIt) {
  FaultsReset reset;
  TempDir tmp;
  auto dir = DirFd::open(tmp.path, false);
  ASSERT_TRUE(dir.ok());
  set_io_faults_for_testing({0, [](const std::string& path, uint64_t off) {
                               return path.find("x.safetensors") != std::string::npos && off >= 8192 ? EIO : 0;
                             }});
  const Tensors t;
  for (const FileIoOptions& o : small_chunk_options()) {
    Status s = write_safetensors_parallel(*dir, "x.safetensors", t.list, {}, o);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find(tmp / "x.safetensors"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("Input/output error"), std::string::npos) << s.message();
    EXPECT_FALSE(std::filesystem::exists(tmp / "x.safetensors"));
  }
}

}  // namespace
}  // namespace mt

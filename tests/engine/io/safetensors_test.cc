// Safetensors reader/writer: round trips, F16 input, sharding, and every malformed-header case.
#include "engine/io/safetensors.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "engine/base/json.h"

#include "tests/engine/temp_dir.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

struct TempDir : testing_util::TempDir {
  TempDir() : testing_util::TempDir("mt-st") {}
};

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// A file from a header text and data bytes.
std::string make_file(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return out + header + data;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

Status parse_bytes(const std::string& bytes) {
  return SafetensorsFile::from_bytes(bytes, "bad.safetensors").status();
}

// Expects parsing to fail with a message naming the file and containing `what`.
void expect_bad(const std::string& bytes, const std::string& what) {
  Status s = parse_bytes(bytes);
  ASSERT_FALSE(s.ok()) << "expected failure containing: " << what;
  EXPECT_NE(s.message().find("bad.safetensors"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
}

TEST(Safetensors, RoundTripF32) {
  TempDir dir;
  auto a = random_floats(6, 1), b = random_floats(5, 2);
  std::vector<WriteTensor> ts = {{"a", {2, 3}, DType::kF32, a.data(), DType::kF32},
                                 {"b.weight", {5}, DType::kF32, b.data(), DType::kF32},
                                 {"empty", {0, 4}, DType::kF32, nullptr, DType::kF32}};
  ASSERT_TRUE(write_safetensors(dir / "x.safetensors", ts, {{"format", "pt"}, {"k", "v"}}).ok());
  auto f = SafetensorsFile::open(dir / "x.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->header().metadata.at("format"), "pt");
  EXPECT_EQ((*f)->header().metadata.at("k"), "v");
  EXPECT_EQ((*f)->header().data_start % 8, 0u);
  ASSERT_EQ((*f)->tensors().size(), 3u);
  const TensorInfo* ta = (*f)->find("a");
  ASSERT_TRUE(ta);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 3}));
  std::vector<float> out(6);
  ASSERT_TRUE((*f)->read_f32(*ta, out.data()).ok());
  EXPECT_EQ(out, a);
  const float* view = (*f)->f32_view(*ta);
  ASSERT_NE(view, nullptr);  // header padded to 8 bytes: first tensor is aligned
  EXPECT_EQ(std::vector<float>(view, view + 6), a);
  std::vector<float> outb(5);
  ASSERT_TRUE((*f)->read_f32(*(*f)->find("b.weight"), outb.data()).ok());
  EXPECT_EQ(outb, b);
  EXPECT_EQ((*f)->find("empty")->numel(), 0u);
}

TEST(Safetensors, RoundTripBF16) {
  TempDir dir;
  auto a = random_floats(1000, 3);
  std::vector<bf16> raw(a.size());
  for (size_t i = 0; i < a.size(); ++i) raw[i] = float_to_bf16(a[i]);
  std::vector<WriteTensor> ts = {{"from_f32", {10, 100}, DType::kBF16, a.data(), DType::kF32},
                                 {"raw", {1000}, DType::kBF16, raw.data(), DType::kBF16},
                                 {"widened", {1000}, DType::kF32, raw.data(), DType::kBF16}};
  ASSERT_TRUE(write_safetensors(dir / "b.safetensors", ts).ok());
  auto f = SafetensorsFile::open(dir / "b.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->find("from_f32")->dtype, DType::kBF16);
  EXPECT_EQ((*f)->find("widened")->dtype, DType::kF32);
  for (const char* name : {"from_f32", "raw", "widened"}) {
    std::vector<float> out(1000);
    std::vector<bf16> outb(1000);
    ASSERT_TRUE((*f)->read_f32(*(*f)->find(name), out.data()).ok());
    ASSERT_TRUE((*f)->read_bf16(*(*f)->find(name), outb.data()).ok());
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(out[i], bf16_to_float(raw[i])) << name << " " << i;
      ASSERT_EQ(outb[i].bits, raw[i].bits) << name << " " << i;
    }
  }
}

TEST(Safetensors, ReadsF16) {
  const uint16_t h[] = {0x3c00, 0xc000, 0x3800, 0x7bff, 0x0001, 0x7c00, 0x8000, 0x03ff};
  const float want[] = {1.0f, -2.0f, 0.5f, 65504.0f, 5.9604645e-8f, INFINITY, -0.0f, 6.097555e-5f};
  std::string data(reinterpret_cast<const char*>(h), sizeof h);
  auto f = SafetensorsFile::from_bytes(make_file(R"({"h":{"dtype":"F16","shape":[2,4],"data_offsets":[0,16]}})", data),
                                       "f16.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  std::vector<float> out(8);
  ASSERT_TRUE((*f)->read_f32(*(*f)->find("h"), out.data()).ok());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[size_t(i)], want[i]) << i;
  EXPECT_TRUE(std::signbit(out[6]));
  EXPECT_EQ((*f)->f32_view(*(*f)->find("h")), nullptr);
}

TEST(Safetensors, UnsupportedDtypeParsesButDoesNotConvert) {
  auto f = SafetensorsFile::from_bytes(make_file(R"({"ids":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
                                                 std::string(8, '\0')),
                                       "i64.safetensors");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  float out;
  Status s = (*f)->read_f32(*(*f)->find("ids"), &out);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'ids'"), std::string::npos) << s.message();
}

TEST(Safetensors, RejectsTruncatedFile) {
  expect_bad("", "truncated");
  expect_bad(std::string(7, '\0'), "truncated");
  // Every strict prefix of a valid file is rejected without reading past the buffer.
  TempDir dir;
  auto a = random_floats(12, 4);
  ASSERT_TRUE(write_safetensors(dir / "v.safetensors", {{"t", {3, 4}, DType::kF32, a.data(), DType::kF32}}).ok());
  auto full = read_file(dir / "v.safetensors");
  ASSERT_TRUE(full.ok());
  for (size_t n = 0; n < full->size(); ++n) EXPECT_FALSE(parse_bytes(full->substr(0, n)).ok()) << n;
  EXPECT_TRUE(parse_bytes(*full).ok());
  // Truncated on disk: the message names the path.
  write_bytes(dir / "cut.safetensors", full->substr(0, full->size() - 3));
  auto f = SafetensorsFile::open(dir / "cut.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("cut.safetensors"), std::string::npos) << f.status().message();
  EXPECT_NE(f.status().message().find("'t'"), std::string::npos) << f.status().message();
}

TEST(Safetensors, RejectsHeaderLongerThanFile) {
  std::string b = make_file("{}");
  b[0] = char(200);  // claims 200 bytes of header, has 2
  expect_bad(b, "larger than the file");
}

TEST(Safetensors, RejectsOversizeHeader) {
  std::string b(8, '\0');
  const uint64_t n = kMaxSafetensorsHeaderBytes + 1;
  for (int i = 0; i < 8; ++i) b[size_t(i)] = char((n >> (8 * i)) & 0xff);
  expect_bad(b + "{}", "exceeds the limit");
  b.assign(8, char(0xff));
  expect_bad(b, "exceeds the limit");
}

TEST(Safetensors, RejectsInvalidJson) {
  expect_bad(make_file(R"({"a":{"dtype":"F32",)"), "invalid header");
  expect_bad(make_file("[1, 2]"), "not a JSON object");
  expect_bad(make_file(R"({"a": 3})"), "'a'");
  expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[1]}})", "xxxx"), "data_offsets");
  expect_bad(make_file(R"({"__metadata__":{"k":1}})"), "__metadata__");
}

TEST(Safetensors, RejectsOverlappingOffsets) {
  expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                       std::string(12, '\0')),
             "overlap");
}

TEST(Safetensors, RejectsOutOfRangeOffsets) {
  expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::string(8, '\0')),
             "out of range");
  expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", std::string(8, '\0')),
             "invalid data_offsets");
  expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})"), "invalid data_offsets");
  expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, '\0')), "gap");
  expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(8, '\0')),
             "cover 4 bytes");
}

TEST(Safetensors, RejectsSizeMismatch) {
  expect_bad(make_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')),
             "needs 12 bytes but data_offsets span 8");
  expect_bad(make_file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                       std::string(8, '\0')),
             "overflows");
}

TEST(Safetensors, RejectsHugeNumbers) {  // found by fuzz/safetensors_fuzz.cc
  expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,2222222222222222222222222222]}})",
                       std::string(8, '\0')),
             "data_offsets");
  expect_bad(make_file(R"({"a":{"dtype":"F32","shape":[1e300],"data_offsets":[0,4]}})", std::string(4, '\0')),
             "non-integer");
}

TEST(Safetensors, RejectsDuplicateNames) {
  expect_bad(make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                       R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                       std::string(8, '\0')),
             "duplicate key 'w'");
}

TEST(Safetensors, RejectsUnknownDtypeAndNegativeDims) {
  expect_bad(make_file(R"({"w":{"dtype":"F31","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0')),
             "unknown dtype 'F31'");
  expect_bad(make_file(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", std::string(4, '\0')),
             "negative dimension -1");
  expect_bad(make_file(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", std::string(4, '\0')),
             "non-integer");
}

TEST(Safetensors, WriterRejectsBadInput) {
  TempDir dir;
  float x = 1;
  EXPECT_FALSE(write_safetensors(dir / "d.safetensors", {{"a", {1}, DType::kF32, &x, DType::kF32},
                                                          {"a", {1}, DType::kF32, &x, DType::kF32}})
                   .ok());
  EXPECT_FALSE(write_safetensors(dir / "d.safetensors", {{"a", {-1}, DType::kF32, &x, DType::kF32}}).ok());
  EXPECT_FALSE(write_safetensors(dir / "d.safetensors", {{"a", {1}, DType::kF16, &x, DType::kF32}}).ok());
  Status s = write_safetensors(dir / "no/such/dir/d.safetensors", {{"a", {1}, DType::kF32, &x, DType::kF32}});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no/such/dir"), std::string::npos) << s.message();
}

TEST(Safetensors, ShardedWriteAndRead) {
  TempDir dir;
  std::vector<std::vector<float>> data;
  std::vector<WriteTensor> ts;
  for (int i = 0; i < 7; ++i) data.push_back(random_floats(size_t(100 + 37 * i), uint32_t(10 + i)));
  for (int i = 0; i < 7; ++i)
    ts.push_back({"t" + std::to_string(i), {int64_t(data[size_t(i)].size())}, DType::kF32, data[size_t(i)].data(), DType::kF32});
  auto files = write_sharded_safetensors(*DirFd::open(dir.path, false), "model", ts, 1200, {{"format", "pt"}});
  ASSERT_TRUE(files.ok()) << files.status().to_string();
  ASSERT_GT(files->size(), 3u);
  EXPECT_EQ(files->back(), "model.safetensors.index.json");
  EXPECT_EQ(files->front(), "model-00001-of-" + std::string(5 - std::to_string(files->size() - 1).size(), '0') +
                                std::to_string(files->size() - 1) + ".safetensors");
  auto index = Json::parse(*read_file(dir / "model.safetensors.index.json"));
  ASSERT_TRUE(index.ok());
  int64_t total = 0;
  for (const auto& d : data) total += int64_t(d.size() * 4);
  EXPECT_EQ(index->find("metadata")->find("total_size")->as_int(), total);
  EXPECT_EQ(index->find("weight_map")->members().size(), 7u);
  auto set = SafetensorsSet::open(dir.path);
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  ASSERT_EQ((*set)->names().size(), 7u);
  for (int i = 0; i < 7; ++i) {
    const auto* e = (*set)->find("t" + std::to_string(i));
    ASSERT_TRUE(e);
    std::vector<float> out(data[size_t(i)].size());
    ASSERT_TRUE(e->file->read_f32(*e->info, out.data()).ok());
    EXPECT_EQ(out, data[size_t(i)]);
  }
  // One shard: a plain model.safetensors, no index.
  TempDir one;
  auto single = write_sharded_safetensors(*DirFd::open(one.path, false), "model", ts, 0);
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(*single, std::vector<std::string>{"model.safetensors"});
  auto set1 = SafetensorsSet::open(one.path);
  ASSERT_TRUE(set1.ok());
  EXPECT_EQ((*set1)->names().size(), 7u);
}

// A directory with both model.safetensors and model.safetensors.index.json (a re-save left the
// other behind): the single file is read, as transformers' from_pretrained reads it. The index
// used to win, so a job trained from other weights than the ones the user's tools loaded.
TEST(Safetensors, BothASingleFileAndAnIndexReadTheSingleFile) {
  TempDir dir;
  const float single = 1.0f, sharded = 2.0f;
  ASSERT_TRUE(write_safetensors(dir / "model.safetensors", {{"a", {1}, DType::kF32, &single, DType::kF32}}).ok());
  ASSERT_TRUE(write_safetensors(dir / "s1.safetensors", {{"a", {1}, DType::kF32, &sharded, DType::kF32}}).ok());
  write_bytes(dir / "model.safetensors.index.json", R"({"weight_map": {"a": "s1.safetensors"}})");
  auto set = SafetensorsSet::open(dir.path);
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  const auto* e = (*set)->find("a");
  ASSERT_TRUE(e);
  float out = 0;
  ASSERT_TRUE(e->file->read_f32(*e->info, &out).ok());
  EXPECT_EQ(out, single);
  EXPECT_NE((*set)->describe().find("model.safetensors'"), std::string::npos) << (*set)->describe();
  auto by_index = SafetensorsSet::open(dir / "model.safetensors.index.json");  // named outright: the index
  ASSERT_TRUE(by_index.ok());
  ASSERT_TRUE((*by_index)->find("a")->file->read_f32(*(*by_index)->find("a")->info, &out).ok());
  EXPECT_EQ(out, sharded);
}

TEST(Safetensors, ShardedIndexErrors) {
  TempDir dir;
  float x = 1;
  ASSERT_TRUE(write_safetensors(dir / "s1.safetensors", {{"a", {1}, DType::kF32, &x, DType::kF32}}).ok());
  ASSERT_TRUE(write_safetensors(dir / "s2.safetensors", {{"a", {1}, DType::kF32, &x, DType::kF32}}).ok());
  auto open_with = [&](const std::string& index) {
    write_bytes(dir / "model.safetensors.index.json", index);
    return SafetensorsSet::open(dir.path).status();
  };
  Status s = open_with(R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}})");
  EXPECT_NE(s.message().find("'b'"), std::string::npos) << s.message();
  s = open_with(R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})");
  EXPECT_NE(s.message().find("appears in both"), std::string::npos) << s.message();
  s = open_with(R"({"weight_map": {"a": "../s1.safetensors"}})");
  EXPECT_NE(s.message().find("not a plain file name"), std::string::npos) << s.message();
  s = open_with(R"({"weight_map": {"a": "missing.safetensors"}})");
  EXPECT_NE(s.message().find("missing.safetensors"), std::string::npos) << s.message();
  s = open_with(R"({"weights": {}})");
  EXPECT_NE(s.message().find("weight_map"), std::string::npos) << s.message();
  TempDir empty;
  EXPECT_EQ(SafetensorsSet::open(empty.path).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace mt

// Checkpoints through the parallel aligned I/O (direct_io.h): the same bytes as the streaming
// writer in both layouts, loaded bit-identically by the old reading path and the new one; an
// O_DIRECT refusal still checkpoints; an I/O error mid-write fails the checkpoint naming the file
// and leaves the previous one intact and current.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include "engine/io/checkpoint.h"
#include "engine/io/direct_io.h"
#include "engine/io/safetensors.h"

#include "tests/engine/temp_dir.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

struct TempDir : testing_util::TempDir {
  TempDir() : testing_util::TempDir("mt-ckio") {}
};

// Sets the process's checkpoint I/O for one test; puts back the options and clears any fault.
struct IoScope {
  FileIoOptions saved = checkpoint_io_options();
  explicit IoScope(FileIoOptions o) { set_checkpoint_io_options(o); }
  ~IoScope() {
    set_checkpoint_io_options(saved);
    set_io_faults_for_testing({});
  }
};

// Pieces of 64 KiB on 3 threads: the tiny model's files cross many of them.
FileIoOptions small_pieces(FileIoMode m) { return {m, 3, size_t(64) << 10}; }

ModelConfig tiny() { return preset_config("tiny").value(); }

std::unique_ptr<HostStore> make_store(const ModelConfig& cfg, MemoryLayout layout) {
  return HostStore::create(build_param_schemas(cfg), layout, false, default_host_allocator()).value();
}

void fill_random(HostStore& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 0.05f);
  const bool exact = s.layout() == MemoryLayout::kExact;
  for (size_t i = 0; i < s.num_units(); ++i) {
    const HostUnit& u = s.unit(i);
    for (size_t k = 0; k < u.numel; ++k) u.master[k] = d(rng);
    for (void* p : {u.m, u.v})
      for (size_t k = 0; k < u.numel; ++k) {
        if (exact) static_cast<float*>(p)[k] = d(rng);
        else static_cast<bf16*>(p)[k] = float_to_bf16(d(rng));
      }
  }
}

void expect_same(const HostStore& a, const HostStore& b) {
  const size_t st = state_elem_bytes(a.layout());
  for (size_t i = 0; i < a.num_units(); ++i) {
    const HostUnit &x = a.unit(i), &y = b.unit(i);
    EXPECT_EQ(std::memcmp(x.master, y.master, x.numel * 4), 0) << "master of unit " << i;
    EXPECT_EQ(std::memcmp(x.m, y.m, x.numel * st), 0) << "m of unit " << i;
    EXPECT_EQ(std::memcmp(x.v, y.v, x.numel * st), 0) << "v of unit " << i;
  }
}

TrainerState state_at(long step) {
  TrainerState s;
  s.step = step;
  s.data_cursor = uint64_t(step) * 10;
  return s;
}

std::string bytes_of(const std::string& path) { return read_file(path).value(); }

void same_bytes_and_loads(MemoryLayout layout) {
  TempDir stream_root, direct_root;
  const ModelConfig cfg = tiny();
  auto a = make_store(cfg, layout);
  fill_random(*a, 11);
  std::string stream_dir, direct_dir;
  {
    IoScope io(small_pieces(FileIoMode::kStream));
    stream_dir = save_checkpoint(stream_root.path, cfg, *a, state_at(4), 2).value();
  }
  IoScope io(small_pieces(FileIoMode::kDirect));
  direct_dir = save_checkpoint(direct_root.path, cfg, *a, state_at(4), 2).value();
  for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
    const std::string want = bytes_of(stream_dir + "/" + f);
    EXPECT_NE(want.size() % kDirectIoAlign, 0u) << f << ": no tail to write through the page cache";
    EXPECT_EQ(bytes_of(direct_dir + "/" + f), want) << f;
  }
  for (FileIoMode read_mode : {FileIoMode::kStream, FileIoMode::kDirect, FileIoMode::kBuffered}) {
    set_checkpoint_io_options(small_pieces(read_mode));  // the old reading path (stream) too
    auto b = make_store(cfg, layout);
    auto st = load_checkpoint(direct_dir, cfg, *b);
    ASSERT_TRUE(st.ok()) << st.status().to_string();
    EXPECT_EQ(st->step, 4);
    expect_same(*a, *b);
  }
  auto model = SafetensorsFile::open(direct_dir + "/model.safetensors");  // and tensor by tensor
  ASSERT_TRUE(model.ok());
  const auto units = build_param_schemas(cfg);
  for (size_t i = 0; i < units.size(); ++i)
    for (const auto& t : units[i].tensors) {
      std::vector<float> w(t.numel);
      ASSERT_TRUE((*model)->read_f32(*(*model)->find(t.name), w.data()).ok());
      EXPECT_EQ(std::memcmp(w.data(), a->unit(i).master + t.offset, t.numel * 4), 0) << t.name;
    }
}

TEST(CheckpointIo, DirectWritesTheStreamingBytesExact) { same_bytes_and_loads(MemoryLayout::kExact); }
TEST(CheckpointIo, DirectWritesTheStreamingBytesCompact) { same_bytes_and_loads(MemoryLayout::kCompact); }

TEST(CheckpointIo, RefusedDirectStillCheckpoints) {
  IoScope io(small_pieces(FileIoMode::kDirect));
  set_io_faults_for_testing({EINVAL, nullptr});
  TempDir root;
  const ModelConfig cfg = tiny();
  auto a = make_store(cfg, MemoryLayout::kCompact);
  fill_random(*a, 12);
  const FileIoCounters before = file_io_counters();
  auto dir = save_checkpoint(root.path, cfg, *a, state_at(3), 2);
  ASSERT_TRUE(dir.ok()) << dir.status().to_string();
  EXPECT_EQ(file_io_counters().buffered, before.buffered + 2);  // model and optimizer
  EXPECT_NE(take_direct_io_notice().find("O_DIRECT is refused"), std::string::npos);
  auto b = make_store(cfg, MemoryLayout::kCompact);
  ASSERT_TRUE(load_checkpoint(*dir, cfg, *b).ok());
  expect_same(*a, *b);
}

// An EIO halfway through optimizer.safetensors, in every mode.
TEST(CheckpointIo, WriteErrorFailsNamingTheFileAndKeepsThePreviousCheckpoint) {
  for (FileIoMode mode : {FileIoMode::kDirect, FileIoMode::kBuffered, FileIoMode::kStream}) {
    IoScope io(small_pieces(mode));
    TempDir root;
    const ModelConfig cfg = tiny();
    auto a = make_store(cfg, MemoryLayout::kExact);
    fill_random(*a, 13);
    ASSERT_TRUE(save_checkpoint(root.path, cfg, *a, state_at(100), 2).ok());
    const std::string model = bytes_of(root / "step-00000100/model.safetensors");
    const std::string opt = bytes_of(root / "step-00000100/optimizer.safetensors");
    set_io_faults_for_testing({0, [&](const std::string& path, uint64_t off) {
                                 return path.find("optimizer.safetensors") != std::string::npos && off >= opt.size() / 2 ? EIO : 0;
                               }});
    auto b = make_store(cfg, MemoryLayout::kExact);
    fill_random(*b, 14);
    auto r = save_checkpoint(root.path, cfg, *b, state_at(200), 2);
    ASSERT_FALSE(r.ok()) << file_io_mode_name(mode);
    const std::string& m = r.status().message();
    EXPECT_NE(m.find(".tmp-step-00000200/optimizer.safetensors"), std::string::npos) << m;
    EXPECT_NE(m.find("Input/output error"), std::string::npos) << m;
    EXPECT_NE(m.find("saving checkpoint step-00000200"), std::string::npos) << m;
    set_io_faults_for_testing({});
    EXPECT_EQ(bytes_of(root / "latest"), "step-00000100\n");
    EXPECT_FALSE(fs::exists(root / "step-00000200"));
    EXPECT_FALSE(fs::exists(root / ".tmp-step-00000200"));
    EXPECT_EQ(bytes_of(root / "step-00000100/model.safetensors"), model);
    EXPECT_EQ(bytes_of(root / "step-00000100/optimizer.safetensors"), opt);
    auto c = make_store(cfg, MemoryLayout::kExact);
    auto st = load_checkpoint(resolve_checkpoint(root.path).value(), cfg, *c);
    ASSERT_TRUE(st.ok()) << st.status().to_string();
    EXPECT_EQ(st->step, 100);
    expect_same(*a, *c);
  }
}

}  // namespace
}  // namespace mt

// The NVMe tier on its own: state written through the window reads back exactly (in the order
// it reads ahead and out of it, through a window of one, in chunks smaller than a unit), reads
// as zeros until written and after zero_all, and reaches the drive for read_part; and its
// failures — a filesystem without direct I/O, tmpfs, a drive without the room, an I/O error in
// the middle of the work — refused or failed naming the path and the unit.
#include <gtest/gtest.h>
#include <sys/vfs.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <vector>

#include "engine/optim/nvme_tier.h"
#include "tests/engine/nvme_dir.h"

namespace mt {
namespace {

using testing_util::NvmeDir;

// Unit u's m, v and master elements after `round` rounds of writes: distinct per unit, part, round.
float pattern(size_t u, int part, int round, size_t i) { return float(u * 1000000 + part * 100000 + round * 10000) + float(i % 9973); }

struct Fixture {
  std::vector<size_t> numel = {0, 1000, 3000, 0, 500, 7000};  // units 0 and 3 are not tiered
  NvmeDir a{"tier-a"}, b{"tier-b"};
  NvmeTierOptions opt() const {
    NvmeTierOptions o;
    o.paths = {a.path, b.path};
    o.masters = true;
    o.window = 2;
    o.io_threads = 3;
    o.chunk_bytes = 2 * kDirectAlign;  // several chunks a unit
    return o;
  }
  std::vector<size_t> order() const { return {1, 2, 4, 5}; }
};

// One round: every unit in `order` checked against the previous round's pattern (zeros before
// the first), then written with this round's.
void round_trip(NvmeTier& t, const std::vector<size_t>& order, const std::vector<size_t>& numel, int round) {
  for (size_t u : order) {
    auto s = t.acquire(u);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    float* parts[3] = {static_cast<float*>(s->m), static_cast<float*>(s->v), s->master};
    for (int p = 0; p < 3; ++p)
      for (size_t i = 0; i < numel[u]; ++i) {
        ASSERT_EQ(parts[p][i], round == 0 ? 0.0f : pattern(u, p, round - 1, i)) << "unit " << u << " part " << p << " i " << i;
        parts[p][i] = pattern(u, p, round, i);
      }
    t.release(u, true);
  }
}

TEST(NvmeTier, StateWrittenThroughTheWindowReadsBackExactly) {
  Fixture f;
  auto t = NvmeTier::create(f.opt(), f.numel, sizeof(float));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  (*t)->set_order(f.order());
  for (int round = 0; round < 3; ++round) round_trip(**t, f.order(), f.numel, round);
  ASSERT_TRUE((*t)->flush().ok());
  // On the drive: read_part at an unaligned offset, each part.
  for (size_t u : f.order())
    for (int p = 0; p < 3; ++p) {
      std::vector<float> got(f.numel[u] - 3);
      ASSERT_TRUE((*t)->read_part(u, NvmeTier::Part(p), 3 * sizeof(float), got.size() * sizeof(float), got.data()).ok());
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], pattern(u, p, 2, i + 3)) << "unit " << u << " part " << p;
    }
  // 4 units x 3 rounds went out and (but for the first round's zeros) came back in, all of them
  // over the window: more than it holds.
  const uint64_t state = (1000 + 3000 + 500 + 7000) * 3 * sizeof(float);
  EXPECT_GE((*t)->bytes_written(), 3 * state);
  EXPECT_GE((*t)->bytes_read(), 2 * state);
  EXPECT_EQ((*t)->file_bytes(), nvme_tier_layout(f.opt(), f.numel, sizeof(float)).total());
}

TEST(NvmeTier, AnyOrderThroughAWindowOfOne) {
  Fixture f;
  NvmeTierOptions o = f.opt();
  o.window = 1;
  o.io_threads = 1;
  auto t = NvmeTier::create(o, f.numel, sizeof(float));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  (*t)->set_order(f.order());
  std::vector<size_t> order = f.order();
  std::mt19937 rng(5);
  for (int round = 0; round < 4; ++round) {
    std::shuffle(order.begin(), order.end(), rng);  // not the order it reads ahead in
    round_trip(**t, order, f.numel, round);
  }
  ASSERT_TRUE((*t)->flush().ok());
}

TEST(NvmeTier, ZeroAllMakesEveryUnitReadZeros) {
  Fixture f;
  auto t = NvmeTier::create(f.opt(), f.numel, sizeof(float));
  ASSERT_TRUE(t.ok());
  (*t)->set_order(f.order());
  round_trip(**t, f.order(), f.numel, 0);
  (*t)->zero_all();
  round_trip(**t, f.order(), f.numel, 0);  // zeros again, as before any write
  ASSERT_TRUE((*t)->flush().ok());
}

TEST(NvmeTier, TheLayoutStripesUnitsOverThePathsInPages) {
  Fixture f;
  const NvmeLayout l = nvme_tier_layout(f.opt(), f.numel, 2);  // bf16 moments
  ASSERT_EQ(l.regions.size(), f.numel.size());
  EXPECT_EQ(l.regions[0].file, -1);
  EXPECT_EQ(l.regions[3].file, -1);
  EXPECT_EQ(l.regions[1].file, 0);
  EXPECT_EQ(l.regions[2].file, 1);
  EXPECT_EQ(l.regions[4].file, 0);
  EXPECT_EQ(l.regions[5].file, 1);
  EXPECT_EQ(l.regions[4].offset, l.regions[1].bytes());
  EXPECT_EQ(l.regions[5].m_bytes, direct_round_up(7000 * 2));
  EXPECT_EQ(l.regions[5].master_bytes, direct_round_up(7000 * 4));
  EXPECT_EQ(l.largest, l.regions[5].bytes());
  for (const NvmeRegion& r : l.regions) EXPECT_EQ(r.offset % kDirectAlign, 0u);
}

TEST(NvmeTierFailure, AnIoErrorFailsNamingThePathAndTheUnitAndStays) {
  Fixture f;
  auto t = NvmeTier::create(f.opt(), f.numel, sizeof(float));
  ASSERT_TRUE(t.ok());
  (*t)->set_order(f.order());
  round_trip(**t, f.order(), f.numel, 0);  // every unit written once: later acquires read
  ASSERT_TRUE((*t)->flush().ok());
  (*t)->inject_io_error(4);
  Status failed;
  for (int round = 1; round < 4 && failed.ok(); ++round)
    for (size_t u : f.order()) {
      auto s = (*t)->acquire(u);
      if (!s.ok()) {
        failed = s.status();
        break;
      }
      (*t)->release(u, true);
    }
  if (failed.ok()) failed = (*t)->flush();
  ASSERT_FALSE(failed.ok()) << "the injected error must surface";
  EXPECT_NE(failed.message().find("Input/output error"), std::string::npos) << failed.to_string();
  EXPECT_TRUE(failed.message().find(f.a.path) != std::string::npos || failed.message().find(f.b.path) != std::string::npos)
      << failed.to_string();
  EXPECT_NE(failed.message().find("unit "), std::string::npos) << failed.to_string();
  // Sticky: the tier is unusable from then on.
  auto again = (*t)->acquire(1);
  EXPECT_FALSE(again.ok());
  EXPECT_FALSE((*t)->error().ok());
}

TEST(NvmeTierFailure, AFilesystemWithoutDirectIoIsRefusedNamingIt) {
  Fixture f;
  DirectFile::set_faults_for_testing(EINVAL, false);
  auto t = NvmeTier::create(f.opt(), f.numel, sizeof(float));
  DirectFile::set_faults_for_testing(0, false);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(t.status().message().find("without direct I/O"), std::string::npos) << t.status().to_string();
  EXPECT_NE(t.status().message().find(f.a.path), std::string::npos) << t.status().to_string();
}

TEST(NvmeTierFailure, TmpfsIsRefusedNamingIt) {
  Fixture f;
  DirectFile::set_faults_for_testing(0, true);
  auto t = NvmeTier::create(f.opt(), f.numel, sizeof(float));
  DirectFile::set_faults_for_testing(0, false);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(t.status().message().find("tmpfs"), std::string::npos) << t.status().to_string();
  // A real one, where the machine has it (since Linux 6.6 tmpfs takes O_DIRECT: it is refused
  // for being memory, not for lacking direct I/O).
  struct statfs sf {};
  if (::statfs("/dev/shm", &sf) == 0 && long(sf.f_type) == 0x01021994) {
    NvmeTierOptions o = f.opt();
    o.paths = {"/dev/shm"};
    auto shm = NvmeTier::create(o, f.numel, sizeof(float));
    ASSERT_FALSE(shm.ok());
    EXPECT_NE(shm.status().message().find("'/dev/shm' is on tmpfs"), std::string::npos) << shm.status().to_string();
  }
}

TEST(NvmeTierFailure, ADriveWithoutTheRoomIsRefusedBeforeAnyByteIsReserved) {
  Fixture f;
  struct statfs sf {};
  ASSERT_EQ(::statfs(f.a.path.c_str(), &sf), 0);
  const uint64_t free = uint64_t(sf.f_bavail) * uint64_t(sf.f_bsize);
  const std::vector<size_t> huge = {0, size_t(free / 8 + (uint64_t(1) << 30))};  // m + v: past the free bytes
  NvmeTierOptions o = f.opt();
  o.paths = {f.a.path};
  o.masters = false;
  auto t = NvmeTier::create(o, huge, sizeof(float));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(t.status().message().find("no space"), std::string::npos) << t.status().to_string();
  EXPECT_NE(t.status().message().find(f.a.path), std::string::npos) << t.status().to_string();
}

TEST(NvmeTierFailure, ScratchFilesLeaveNothingBehind) {
  Fixture f;
  {
    auto t = NvmeTier::create(f.opt(), f.numel, sizeof(float));
    ASSERT_TRUE(t.ok());
    EXPECT_TRUE(std::filesystem::is_empty(f.a.path));  // unnamed while it is open
  }
  EXPECT_TRUE(std::filesystem::is_empty(f.a.path));
  EXPECT_TRUE(std::filesystem::is_empty(f.b.path));
}

TEST(NvmeTierFailure, BadOptionsAreRefused) {
  Fixture f;
  NvmeTierOptions o = f.opt();
  o.window = 0;
  EXPECT_FALSE(NvmeTier::create(o, f.numel, 4).ok());
  o = f.opt();
  o.chunk_bytes = 1000;
  EXPECT_FALSE(NvmeTier::create(o, f.numel, 4).ok());
  o = f.opt();
  o.paths.clear();
  EXPECT_FALSE(NvmeTier::create(o, f.numel, 4).ok());
  o = f.opt();
  o.paths = {f.a.path + "/does-not-exist"};
  auto t = NvmeTier::create(o, f.numel, 4);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("does-not-exist"), std::string::npos) << t.status().to_string();
}

}  // namespace
}  // namespace mt

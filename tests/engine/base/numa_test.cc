// NUMA placement (issue 26 point 3): the nodes read from sysfs (memory-only nodes left out),
// workers spread over them in contiguous runs, a range bound to a node lands there, and the
// host store binds each worker's update block to the worker's node.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "engine/base/numa.h"
#include "engine/optim/host_store.h"
#include "engine/optim/optimizer.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

TEST(Numa, ParsesCpuLists) {
  EXPECT_EQ(*parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(*parse_cpu_list(""), std::vector<int>{});
  EXPECT_EQ(*parse_cpu_list("5"), std::vector<int>{5});
  for (const char* bad : {"a", "3-1", "1-", "-2", "1,x", "2-3z"}) EXPECT_FALSE(parse_cpu_list(bad).ok()) << bad;
}

TEST(Numa, ReadsNodesWithUsableCpusOnly) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; ++c)
    if (CPU_ISSET(c, &set)) first = c;
  const fs::path dir = fs::path(::testing::TempDir()) / "numa_sysfs";
  fs::remove_all(dir);
  auto node = [&](const char* name, const std::string& cpus) {
    fs::create_directories(dir / name);
    std::ofstream(dir / name / "cpulist") << cpus << "\n";
  };
  node("node0", std::to_string(first));
  node("node1", "");          // memory only (CXL, a GH200's GPU memory)
  node("node3", "4000-4001");  // CPUs this process may not use
  fs::create_directories(dir / "power");  // not a node
  const NumaNodes n = NumaNodes::read(dir.string());
  EXPECT_EQ(n.ids, std::vector<int>{0});
  ASSERT_EQ(n.cpus.size(), 1u);
  EXPECT_EQ(n.cpus[0], std::vector<int>{first});
  // No sysfs at all: one node with every allowed CPU.
  const NumaNodes none = NumaNodes::read((dir / "absent").string());
  EXPECT_EQ(none.ids, std::vector<int>{0});
  EXPECT_EQ(int(none.cpus[0].size()), CPU_COUNT(&set));
}

TEST(Numa, SpreadsWorkersInContiguousRunsByCpus) {
  NumaNodes two{{0, 1}, {std::vector<int>(8), std::vector<int>(8)}};
  EXPECT_EQ(NumaPlacement::for_threads(16, two).worker_node, (std::vector<int>{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(NumaPlacement::for_threads(3, two).worker_node, (std::vector<int>{0, 1, 1}));
  NumaNodes uneven{{2, 5}, {std::vector<int>(8), std::vector<int>(4)}};
  EXPECT_EQ(NumaPlacement::for_threads(6, uneven).worker_node, (std::vector<int>{2, 2, 2, 2, 5, 5}));
  EXPECT_TRUE(NumaPlacement::for_threads(6, uneven).active());
  EXPECT_EQ(NumaPlacement::for_threads(16, two).describe(), "16 threads pinned over NUMA nodes 0 (8) and 1 (8)");
  NumaNodes one{{0}, {std::vector<int>(4)}};
  EXPECT_FALSE(NumaPlacement::for_threads(4, one).active());
  EXPECT_EQ(NumaPlacement::for_threads(4, one).describe(), "4 threads on one NUMA node (not pinned)");
}

bool mbind_forbidden(const Status& s) {
  return s.message().find("Operation not permitted") != std::string::npos ||
         s.message().find("Function not implemented") != std::string::npos;
}

// The policy itself is checked (a wrong node mask reads back as another node or none); on a host
// of several nodes also where the pages land, touched from a thread on another node.
TEST(Numa, MegatrainNumaOffLeavesTheWorkersUnplaced) {
  ::unsetenv("MEGATRAIN_NUMA");
  const NumaPlacement on = optimizer_placement(3);
  ASSERT_EQ(on.worker_node.size(), 3u);
  for (int n : on.worker_node) EXPECT_GE(n, 0) << "every worker has a node";
  ::setenv("MEGATRAIN_NUMA", "off", 1);
  const NumaPlacement off = optimizer_placement(3);
  ::unsetenv("MEGATRAIN_NUMA");
  EXPECT_FALSE(off.active());
  EXPECT_EQ(off.worker_node, (std::vector<int>{-1, -1, -1}));
}

TEST(Numa, ARangeBoundToANodeLandsThere) {
  const NumaNodes here = NumaNodes::read();
  const int node = here.ids.back();
  const size_t bytes = size_t(8) << 20;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  EXPECT_EQ(preferred_node(p), -1) << "fresh memory has no policy";
  const Status s = prefer_node(p, bytes, node);
  if (mbind_forbidden(s)) GTEST_SKIP() << "mbind is not allowed here: " << s.message();
  ASSERT_TRUE(s.ok()) << s.message();
  for (size_t off = 0; off < bytes; off += size_t(1) << 20) EXPECT_EQ(preferred_node(static_cast<char*>(p) + off), node);
  if (here.ids.size() > 1) {  // touched from the first node's CPUs, placed on the last node
    std::thread([&] {
      ASSERT_TRUE(pin_current_thread(here.cpus[0]).ok());
      std::memset(p, 1, bytes);
    }).join();
  } else {
    std::memset(p, 1, bytes);
  }
  for (size_t off = 0; off < bytes; off += size_t(1) << 20) EXPECT_EQ(node_of_page(static_cast<char*>(p) + off), node);
  EXPECT_FALSE(prefer_node(p, bytes, 5000).ok()) << "a node past the mask is refused";
  ::munmap(p, bytes);
}

// Units of several tensors; the store on a made-up two-node placement of four workers.
TEST(Numa, TheStoreBindsEachWorkersUpdateBlockToItsNode) {
  std::vector<ParamSchema> units(3);
  size_t sizes[3][2] = {{2'000'000, 1'000'000}, {3'500'000, 77}, {70'000, 0}};
  for (size_t u = 0; u < 3; ++u) {
    size_t off = 0;
    for (size_t t = 0; t < 2 && sizes[u][t] > 0; ++t) {
      units[u].tensors.push_back({"t" + std::to_string(t), {int64_t(sizes[u][t])}, off, sizes[u][t], t == 0});
      off += sizes[u][t];
    }
    units[u].numel = off;
  }
  const NumaPlacement numa = NumaPlacement::for_threads(4, NumaNodes{{0, 1}, {{0}, {1}}});
  for (MemoryLayout layout : {MemoryLayout::kExact, MemoryLayout::kCompact}) {
    auto store = HostStore::create(units, layout, true, default_host_allocator(), {}, nullptr, &numa);
    ASSERT_TRUE(store.ok()) << store.status().message();
    const auto& runs = (*store)->numa_runs();
    ASSERT_FALSE(runs.empty());
    // The runs of a chunk ascend without overlap.
    for (size_t r = 1; r < runs.size(); ++r)
      if (runs[r].chunk == runs[r - 1].chunk) {
        EXPECT_GE(runs[r].begin, runs[r - 1].end);
      }
    auto node_at = [&](const void* p) {
      for (const NumaRun& r : runs) {
        const char* c = static_cast<const char*>(r.chunk);
        if (p >= c + r.begin && p < c + r.end) return r.node;
      }
      return -1;
    };
    const size_t st = state_elem_bytes(layout), slack = size_t(1) << 20;
    size_t checked = 0;
    for (size_t u = 0; u < units.size(); ++u) {
      const auto blocks = update_blocks(units[u], 4);
      const HostUnit& hu = (*store)->unit(u);
      const std::pair<const void*, size_t> regions[] = {{hu.master, 4}, {hu.grad, st}, {hu.m, st}, {hu.v, st}, {hu.shadow, 2}};
      for (const auto& [base, eb] : regions)
        for (size_t w = 0; w < blocks.size(); ++w)
          for (size_t e = blocks[w].first; e < blocks[w].second; e += 521) {
            // Edges move to the nearest 2 MiB: a byte within 1 MiB of a block's edge (where the
            // next block, maybe the next region's, may be another node's) may go either way.
            const size_t at = e * eb, lo = blocks[w].first * eb, hi = blocks[w].second * eb;
            if (at < lo + slack || at + slack >= hi) continue;
            const int got = node_at(static_cast<const char*>(base) + at);
            if (got == -1 && units[u].numel * eb < slack) continue;  // a unit smaller than a run's grain
            ASSERT_EQ(got, numa.worker_node[w]) << "unit " << u << " worker " << w << " element " << e;
            ++checked;
          }
    }
    EXPECT_GT(checked, 2000u) << "most bytes were checked";
    // This machine may have one node: binding to node 1 then fails, said once, store usable.
    if (!(*store)->numa_status().ok()) {
      EXPECT_NE((*store)->numa_status().message().find("mbind"), std::string::npos);
    }
  }
  // Without a placement nothing is bound.
  auto plain = HostStore::create(units, MemoryLayout::kExact, false, default_host_allocator());
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE((*plain)->numa_runs().empty());
  EXPECT_EQ(preferred_node((*plain)->unit(0).master), -1);
  // Bound for real: two made-up nodes that are both this machine's first, so mbind succeeds
  // here; every run's memory then prefers that node.
  const int first = NumaNodes::read().ids[0];
  const NumaPlacement same = NumaPlacement::for_threads(4, NumaNodes{{first, first}, {{0}, {1}}});
  auto bound = HostStore::create(units, MemoryLayout::kExact, true, default_host_allocator(), {}, nullptr, &same);
  ASSERT_TRUE(bound.ok());
  if (mbind_forbidden((*bound)->numa_status())) GTEST_SKIP() << (*bound)->numa_status().message();
  ASSERT_TRUE((*bound)->numa_status().ok()) << (*bound)->numa_status().message();
  ASSERT_FALSE((*bound)->numa_runs().empty());
  for (const NumaRun& r : (*bound)->numa_runs())
    for (size_t at = r.begin; at < r.end; at += 4096 * 64)
      ASSERT_EQ(preferred_node(static_cast<const char*>(r.chunk) + at), first) << "byte " << at;
}

TEST(Numa, AStoreOfTooManyUnitsForTheMapLimitIsLeftUnplaced) {
  long limit = 0;
  std::ifstream("/proc/sys/vm/max_map_count") >> limit;
  if (limit <= 0 || limit > 1'000'000) GTEST_SKIP() << "vm.max_map_count = " << limit;
  const size_t n = size_t(limit) / 2 / 10 + 1;  // 5 regions x 2 nodes a unit: just over half
  std::vector<ParamSchema> units(n);
  for (auto& u : units) u.numel = 16, u.tensors.push_back({"w", {16}, 0, 16, true});
  const NumaPlacement numa = NumaPlacement::for_threads(2, NumaNodes{{0, 1}, {{0}, {1}}});
  auto store = HostStore::create(units, MemoryLayout::kExact, true, default_host_allocator(), {}, nullptr, &numa);
  ASSERT_TRUE(store.ok()) << store.status().message();
  EXPECT_TRUE((*store)->numa_runs().empty());
  EXPECT_NE((*store)->numa_status().message().find("vm.max_map_count"), std::string::npos)
      << (*store)->numa_status().message();
  units.resize(n - 2);  // under the budget: not refused for it
  auto fits = HostStore::create(units, MemoryLayout::kExact, true, default_host_allocator(), {}, nullptr, &numa);
  ASSERT_TRUE(fits.ok());
  EXPECT_EQ((*fits)->numa_status().message().find("vm.max_map_count"), std::string::npos);
}

// update_blocks names the elements each worker really takes: a pool's parallel_blocks over the
// unit's pieces (kOptimizerPiece a tensor, as adamw_unit cuts them), recorded by worker.
TEST(Numa, UpdateBlocksAreWhatEachWorkerTakes) {
  ParamSchema u;
  size_t off = 0;
  for (size_t n : {size_t(500'000), size_t(3), size_t(131'072), size_t(70'001)}) {
    u.tensors.push_back({"t", {int64_t(n)}, off, n, true});
    off += n;
  }
  u.numel = off;
  std::vector<std::pair<size_t, size_t>> pieces;
  for (const auto& t : u.tensors)
    for (size_t o = 0; o < t.numel; o += kOptimizerPiece) pieces.push_back({t.offset + o, std::min(kOptimizerPiece, t.numel - o)});
  for (int threads : {1, 3, 4, 7, 40}) {
    ThreadPool pool(threads);
    std::vector<int> taker(pieces.size(), -1);
    pool.parallel_blocks(int(pieces.size()), [&](int i) { taker[size_t(i)] = ThreadPool::worker_index(); });
    const auto blocks = update_blocks(u, threads);
    ASSERT_EQ(int(blocks.size()), threads);
    for (size_t i = 0; i < pieces.size(); ++i) {
      const auto& bl = blocks[size_t(taker[i])];
      EXPECT_TRUE(pieces[i].first >= bl.first && pieces[i].first + pieces[i].second <= bl.second)
          << threads << " threads: piece " << i << " taken by worker " << taker[i];
    }
  }
}

TEST(Numa, UpdateBlocksAreTheOptimizersSplit) {
  ParamSchema u;
  u.tensors.push_back({"a", {300'000}, 0, 300'000, true});
  u.tensors.push_back({"b", {5}, 300'000, 5, false});
  u.tensors.push_back({"c", {70'000}, 300'005, 70'000, true});
  u.numel = 370'005;
  // Pieces of kOptimizerPiece per tensor: a -> 5 pieces (4 x 65536 + 37856), b -> 1, c -> 2.
  const auto b = update_blocks(u, 3);  // 8 pieces over 3 workers: [0,2) [2,5) [5,8): a's first
                                       // two; a's other three; b and c
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0], (std::pair<size_t, size_t>{0, 2 * kOptimizerPiece}));
  EXPECT_EQ(b[1], (std::pair<size_t, size_t>{2 * kOptimizerPiece, 300'000}));
  EXPECT_EQ(b[2], (std::pair<size_t, size_t>{300'000, 370'005}));
  const auto many = update_blocks(u, 20);  // more workers than pieces: the rest get nothing
  EXPECT_EQ(many[7], (std::pair<size_t, size_t>{300'005 + kOptimizerPiece, 370'005}));
  for (size_t w = 8; w < many.size(); ++w) EXPECT_EQ(many[w].first, many[w].second);
}

}  // namespace
}  // namespace mt

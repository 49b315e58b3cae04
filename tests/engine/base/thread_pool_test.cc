// The pool's two schedules: every item exactly once; parallel_blocks hands worker b block b, run
// in order, on every call (the optimizer relies on the blocks for its streaming, a NUMA placement
// on the same worker taking the same bytes). And workers placed on nodes run on their CPUs.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <stdexcept>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/base/thread_pool.h"

namespace mt {
namespace {

TEST(ThreadPool, ParallelForRunsEveryItemOnce) {
  ThreadPool pool(3);
  for (int n : {0, 1, 2, 7, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallel_for(n, [&](int i) { hits[size_t(i)]++; });
    for (int i = 0; i < n; ++i) EXPECT_EQ(hits[size_t(i)].load(), 1) << "n " << n << " item " << i;
  }
}

TEST(ThreadPool, ParallelBlocksGivesWorkerBBlockBInOrderOnEveryCall) {
  ThreadPool pool(3);
  for (int round = 0; round < 3; ++round)
    for (int n : {1, 2, 3, 4, 10, 1001}) {
      std::mutex mu;
      std::map<int, std::vector<int>> seen;  // worker -> items in the order it ran them
      pool.parallel_blocks(n, [&](int i) {
        std::lock_guard<std::mutex> lock(mu);
        seen[ThreadPool::worker_index()].push_back(i);
      });
      const int blocks = std::min(n, pool.size());
      ASSERT_EQ(int(seen.size()), blocks) << "n " << n;
      for (int b = 0; b < blocks; ++b) {
        const auto [lo, hi] = ThreadPool::block_range(n, blocks, b);
        std::vector<int> want;
        for (int i = lo; i < hi; ++i) want.push_back(i);
        EXPECT_EQ(seen[b], want) << "n " << n << " worker " << b;
      }
    }
}

TEST(ThreadPool, ItemsRunOnWorkersNotOnTheCaller) {
  ThreadPool pool(2);
  std::atomic<int> on_caller{0};
  pool.parallel_for(50, [&](int) { on_caller += ThreadPool::worker_index() < 0; });
  pool.parallel_blocks(50, [&](int) { on_caller += ThreadPool::worker_index() < 0; });
  EXPECT_EQ(on_caller.load(), 0);
  EXPECT_EQ(ThreadPool::worker_index(), -1);
}

TEST(ThreadPool, WorkersOfANodeRunOnlyOnItsCpus) {
  const NumaNodes here = NumaNodes::read();
  std::vector<int> cpus;
  for (const auto& c : here.cpus) cpus.insert(cpus.end(), c.begin(), c.end());
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs to place workers on two of them";
  // Two made-up nodes, one CPU each: four workers, two a node.
  NumaNodes fake{{0, 1}, {{cpus[0]}, {cpus[1]}}};
  ThreadPool pool(NumaPlacement::for_threads(4, fake));
  ASSERT_TRUE(pool.placement().active());
  std::vector<int> ran_on(4, -1);
  pool.parallel_blocks(4, [&](int i) {
    cpu_set_t set;
    CPU_ZERO(&set);
    ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
    ASSERT_EQ(CPU_COUNT(&set), 1) << "worker " << i;
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) ran_on[size_t(i)] = c;
  });
  EXPECT_EQ(ran_on, (std::vector<int>{cpus[0], cpus[0], cpus[1], cpus[1]}));
}

TEST(ThreadPool, ParallelBlocksSplitsEvenly) {
  // The block boundaries: n * b / size(), so no block differs from another by more than one.
  ThreadPool pool(4);
  std::mutex mu;
  std::map<int, std::vector<int>> seen;
  pool.parallel_blocks(10, [&](int i) {
    std::lock_guard<std::mutex> lock(mu);
    seen[ThreadPool::worker_index()].push_back(i);
  });
  const std::map<int, std::vector<int>> want{{0, {0, 1}}, {1, {2, 3, 4}}, {2, {5, 6}}, {3, {7, 8, 9}}};
  EXPECT_EQ(seen, want);
}

TEST(ThreadPool, ParallelRangesCoverEveryElementOnceInPieces) {
  ThreadPool pool(3);
  std::mutex mu;
  std::map<size_t, size_t> got;  // begin -> length
  pool.parallel_ranges(10, 3, [&](size_t lo, size_t len) {
    std::lock_guard<std::mutex> lock(mu);
    got[lo] = len;
  });
  EXPECT_EQ(got, (std::map<size_t, size_t>{{0, 3}, {3, 3}, {6, 3}, {9, 1}}));
  int calls = 0;
  pool.parallel_ranges(0, 3, [&](size_t, size_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ThreadPool, AnExceptionReachesTheCallerAndThePoolGoesOn) {
  ThreadPool pool(3);
  std::atomic<int> ran{0};
  EXPECT_THROW(pool.parallel_for(9, [&](int i) {
    ++ran;
    if (i == 4) throw std::runtime_error("item 4");
  }), std::runtime_error);
  EXPECT_EQ(ran.load(), 9) << "the other items still run";
  EXPECT_THROW(pool.parallel_blocks(3, [](int i) {
    if (i == 2) throw std::runtime_error("block 2");
  }), std::runtime_error);
  std::atomic<int> after{0};
  pool.parallel_for(5, [&](int) { ++after; });
  EXPECT_EQ(after.load(), 5);
}

TEST(ThreadPool, ACallFromOneOfItsOwnTasksRunsOnThatThread) {
  ThreadPool pool(2);
  std::atomic<int> inner{0}, wrong_thread{0};
  pool.parallel_for(2, [&](int) {
    const int me = ThreadPool::worker_index();
    pool.parallel_blocks(3, [&](int) {
      ++inner;
      wrong_thread += ThreadPool::worker_index() != me;
    });
  });
  EXPECT_EQ(inner.load(), 6);
  EXPECT_EQ(wrong_thread.load(), 0);
}

}  // namespace
}  // namespace mt

// The pool's two schedules: every item exactly once; parallel_blocks hands each thread one
// contiguous block that it runs in order (the optimizer relies on the blocks for its streaming).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
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

TEST(ThreadPool, ParallelBlocksGivesEachThreadOneContiguousAscendingBlock) {
  ThreadPool pool(3);
  for (int n : {0, 1, 2, 3, 4, 10, 1001}) {
    std::mutex mu;
    std::map<std::thread::id, std::vector<int>> seen;  // items in the order each thread ran them
    pool.parallel_blocks(n, [&](int i) {
      std::lock_guard<std::mutex> lock(mu);
      seen[std::this_thread::get_id()].push_back(i);
    });
    std::vector<int> hits(size_t(n), 0);
    for (const auto& [id, items] : seen) {
      ASSERT_FALSE(items.empty());
      for (size_t k = 0; k < items.size(); ++k) {
        ++hits[size_t(items[k])];
        // A thread's items ascend (a fast thread may run a second block: the pool hands out
        // blocks in ascending order, so they still do).
        if (k > 0) {
          EXPECT_LT(items[k - 1], items[k]) << "n " << n;
        }
      }
    }
    for (int i = 0; i < n; ++i) EXPECT_EQ(hits[size_t(i)], 1) << "n " << n << " item " << i;
    EXPECT_LE(int(seen.size()), pool.size());
  }
}

TEST(ThreadPool, ParallelBlocksSplitsEvenly) {
  // The block boundaries: n * b / size(), so no block differs from another by more than one.
  ThreadPool pool(4);
  std::mutex mu;
  std::vector<int> order;
  pool.parallel_blocks(10, [&](int i) {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(i);
  });
  ASSERT_EQ(order.size(), 10u);
  // Blocks of 10 over 4 threads: [0,2) [2,5) [5,7) [7,10); each block's items run in order, so
  // within the recorded order, 1 follows 0, 3 and 4 follow 2, 6 follows 5, 8 and 9 follow 7.
  auto pos = [&](int v) { return std::find(order.begin(), order.end(), v) - order.begin(); };
  EXPECT_LT(pos(0), pos(1));
  EXPECT_LT(pos(2), pos(3));
  EXPECT_LT(pos(3), pos(4));
  EXPECT_LT(pos(5), pos(6));
  EXPECT_LT(pos(7), pos(8));
  EXPECT_LT(pos(8), pos(9));
}

}  // namespace
}  // namespace mt

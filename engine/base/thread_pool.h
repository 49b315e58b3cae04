// A fixed pool of worker threads with blocking parallel loops. Used by the CPU optimizer, the
// tokenizer and the benches; work is split statically, so results never depend on timing.
// The caller waits while the workers run (it takes no item), so parallel_blocks can give block
// b to worker b on every call: the optimizer's threads then always update the same bytes, which
// a NUMA placement (numa.h) binds to their node.
#pragma once
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "engine/base/numa.h"

namespace mt {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // threads <= 0: the CPUs this process may run on
  // Workers placed by `numa` (its worker_node.size() workers); when it is active each worker may
  // run only on its node's CPUs.
  explicit ThreadPool(const NumaPlacement& numa);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()); }
  // Runs fn(i) for i in [0, n) on the workers, items handed out as workers free up; returns when
  // all are done (one item: on the caller). One call at a time (a second caller waits for the
  // first); a call from one of this pool's own tasks runs its items in order on that thread. An
  // exception thrown by fn is rethrown to the caller (the first one; the other items still run).
  void parallel_for(int n, const std::function<void(int)>& fn);
  // The same items in min(n, size()) contiguous blocks, block b (items block_range(n, blocks, b))
  // run in order by worker b: one hand-out a thread, every thread streams through its own part of
  // the memory (the optimizer: 1.37-1.59 G params/s item by item, 1.66 in blocks, on 2 cores),
  // and the same worker takes the same block every call.
  void parallel_blocks(int n, const std::function<void(int)>& fn);
  // [0, n) cut into pieces of `piece` (the last shorter), fn(begin, length) for each, over the
  // workers as parallel_blocks hands them out: bulk copies, zeroing and rounding of host arrays.
  void parallel_ranges(size_t n, size_t piece, const std::function<void(size_t, size_t)>& fn);
  // Items [first, second) of block b when n items are cut into `blocks`: n * b / blocks onwards.
  static std::pair<int, int> block_range(int n, int blocks, int b);
  // The index of the pool worker running the calling thread; -1 on a thread of no pool.
  static int worker_index();
  const NumaPlacement& placement() const { return numa_; }

 private:
  void run(int n, const std::function<void(int)>& fn, bool by_worker);
  void worker_loop(int w);
  // fn(i) with mu_ released; an exception is kept for the caller. Called and returns with lock held.
  void run_item(const std::function<void(int)>& fn, int i, std::unique_lock<std::mutex>& lock);

  NumaPlacement numa_;
  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // one parallel call at a time
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int)>* job_ = nullptr;
  bool by_worker_ = false;
  int next_ = 0, total_ = 0, pending_ = 0;
  long generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;  // the first exception of the current call
};

}  // namespace mt

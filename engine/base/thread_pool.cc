#include "engine/base/thread_pool.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <utility>

namespace mt {

namespace {
thread_local int t_worker = -1;
thread_local const ThreadPool* t_pool = nullptr;  // the pool whose worker this thread is
}

ThreadPool::ThreadPool(int threads) : ThreadPool(NumaPlacement::none(resolve_thread_count(threads))) {}

ThreadPool::ThreadPool(const NumaPlacement& numa) : numa_(numa) {
  if (numa_.worker_node.empty()) numa_ = NumaPlacement::none(1);
  for (int w = 0; w < int(numa_.worker_node.size()); ++w) workers_.emplace_back([this, w] { worker_loop(w); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_ranges(size_t n, size_t piece, const std::function<void(size_t, size_t)>& fn) {
  parallel_blocks(int((n + piece - 1) / piece), [&](int i) {
    const size_t lo = size_t(i) * piece;
    fn(lo, std::min(piece, n - lo));
  });
}

std::pair<int, int> ThreadPool::block_range(int n, int blocks, int b) {
  return {int(int64_t(n) * b / blocks), int(int64_t(n) * (b + 1) / blocks)};
}

int ThreadPool::worker_index() { return t_worker; }

void ThreadPool::parallel_for(int n, const std::function<void(int)>& fn) {
  if (n <= 0) return;
  if (n == 1) return fn(0);  // no worker to wake for one item
  run(n, fn, false);
}

void ThreadPool::parallel_blocks(int n, const std::function<void(int)>& fn) {
  if (n <= 0) return;
  const int blocks = std::min(n, size());
  run(blocks, [&](int b) {
    const auto [lo, hi] = block_range(n, blocks, b);
    for (int i = lo; i < hi; ++i) fn(i);
  }, true);
}

void ThreadPool::run(int n, const std::function<void(int)>& fn, bool by_worker) {
  if (t_pool == this) {  // from one of our own tasks: the workers are busy with the outer call
    for (int i = 0; i < n; ++i) fn(i);
    return;
  }
  std::lock_guard<std::mutex> call(call_mu_);
  std::unique_lock<std::mutex> lock(mu_);
  job_ = &fn;
  by_worker_ = by_worker;
  next_ = 0;
  total_ = n;
  pending_ = size();  // every worker takes part in every call (by_worker: the first n run one)
  ++generation_;
  cv_.notify_all();
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void ThreadPool::run_item(const std::function<void(int)>& fn, int i, std::unique_lock<std::mutex>& lock) {
  lock.unlock();
  std::exception_ptr e;
  try {
    fn(i);
  } catch (...) {
    e = std::current_exception();
  }
  lock.lock();
  if (e && !error_) error_ = e;
}

void ThreadPool::worker_loop(int w) {
  t_worker = w;
  t_pool = this;
  if (numa_.active()) {
    const Status s = pin_current_thread(numa_.cpus_of(numa_.worker_node[size_t(w)]));
    if (!s.ok()) std::fprintf(stderr, "megatrain: optimizer worker %d not pinned: %s\n", w, s.message().c_str());
  }
  long seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    const auto* fn = job_;
    if (by_worker_) {
      if (w < total_) run_item(*fn, w, lock);
    } else {
      while (next_ < total_) run_item(*fn, next_++, lock);
    }
    if (--pending_ == 0) done_cv_.notify_all();
  }
}

}  // namespace mt

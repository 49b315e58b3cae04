#include "engine/base/thread_pool.h"

#include <algorithm>
#include <cstdint>

namespace mt {

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = int(std::thread::hardware_concurrency());
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(int n, const std::function<void(int)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    for (int i = 0; i < n; ++i) fn(i);
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  job_ = &fn;
  next_ = 0;
  total_ = n;
  pending_ = n;
  ++generation_;
  cv_.notify_all();
  while (next_ < total_) {  // the caller works too
    int i = next_++;
    lock.unlock();
    fn(i);
    lock.lock();
    --pending_;
  }
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::parallel_blocks(int n, const std::function<void(int)>& fn) {
  const int blocks = std::min(n, size());
  parallel_for(blocks, [&](int b) {
    const int hi = int(int64_t(n) * (b + 1) / blocks);
    for (int i = int(int64_t(n) * b / blocks); i < hi; ++i) fn(i);
  });
}

void ThreadPool::worker_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || (job_ && next_ < total_); });
    if (stop_) return;
    while (job_ && next_ < total_) {
      int i = next_++;
      const auto* fn = job_;
      lock.unlock();
      (*fn)(i);
      lock.lock();
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }
}

}  // namespace mt

// CpuBackend: the device is a separate, bounded arena in host memory; H2D and D2H are worker
// threads executing their queues in order (optionally throttled to an emulated link
// bandwidth); compute runs synchronously on the calling thread with the CPU op table.
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "engine/backend/backend.h"

namespace mt {

namespace {

using Clock = std::chrono::steady_clock;

class CpuEvent final : public Event {
 public:
  bool done() const override {
    std::lock_guard<std::mutex> l(mu_);
    return done_;
  }
  void complete() {
    {
      std::lock_guard<std::mutex> l(mu_);
      done_ = true;
    }
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return done_; });
  }
  static std::shared_ptr<CpuEvent> completed() {
    auto e = std::make_shared<CpuEvent>();
    e->done_ = true;
    return e;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

// One in-order stream executed by a worker thread.
class CopyStream {
 public:
  explicit CopyStream(double gbps) : gbps_(gbps), worker_([this] { loop(); }) {}
  ~CopyStream() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  void enqueue(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> l(mu_);
      q_.push_back(std::move(task));
    }
    cv_.notify_all();
  }
  // A copy task: runs fn (which moves `bytes`), then sleeps out the emulated link time.
  void enqueue_copy(size_t bytes, std::function<void()> fn) {
    enqueue([this, bytes, fn = std::move(fn)] {
      const auto t0 = Clock::now();
      fn();
      if (gbps_ > 0) std::this_thread::sleep_until(t0 + std::chrono::duration<double>(double(bytes) / (gbps_ * 1e9)));
      std::lock_guard<std::mutex> l(stats_mu_);
      bytes_ += bytes;
      busy_ += std::chrono::duration<double>(Clock::now() - t0).count();
    });
  }
  std::pair<uint64_t, double> take_stats() {
    std::lock_guard<std::mutex> l(stats_mu_);
    auto r = std::make_pair(bytes_, busy_);
    bytes_ = 0;
    busy_ = 0;
    return r;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> l(mu_);
    while (true) {
      cv_.wait(l, [&] { return stop_ || !q_.empty(); });
      if (q_.empty()) return;  // stop requested and drained
      auto task = std::move(q_.front());
      q_.pop_front();
      l.unlock();
      task();
      l.lock();
    }
  }

  double gbps_;
  std::mutex mu_, stats_mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  bool stop_ = false;
  uint64_t bytes_ = 0;
  double busy_ = 0;
  std::thread worker_;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& o) : h2d_(o.link_gbps), d2h_(o.link_gbps) {}
  ~CpuBackend() override { std::free(memory_); }

  std::string name() const override { return "cpu"; }
  HostAllocator& host_allocator() override { return default_host_allocator(); }

  Status reserve_device(size_t bytes) override {
    if (memory_) return failed_precondition("device arena already reserved");
    memory_ = static_cast<char*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096));
    if (!memory_ && bytes) return resource_exhausted("cannot reserve a device arena of " + std::to_string(bytes) + " bytes");
    arena_.reset(memory_, bytes);
    return Status::Ok();
  }
  Result<void*> device_alloc(size_t bytes) override { return arena_.alloc(bytes); }
  size_t device_capacity() const override { return arena_.capacity(); }
  size_t device_peak() const override { return arena_.used(); }

  void copy_h2d(void* dst, const void* src, size_t bytes) override {
    h2d_.enqueue_copy(bytes, [=] { std::memcpy(dst, src, bytes); });
  }
  void copy_d2h(void* dst, const void* src, size_t bytes) override {
    d2h_.enqueue_copy(bytes, [=] { std::memcpy(dst, src, bytes); });
  }
  void copy_d2h_bf16(bf16* dst, const float* src, size_t n) override {
    d2h_.enqueue_copy(n * sizeof(bf16), [=] {
      for (size_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i]);
    });
  }

  EventPtr record(StreamKind s) override {
    if (s == StreamKind::kCompute) return CpuEvent::completed();  // compute is synchronous
    auto e = std::make_shared<CpuEvent>();
    stream(s).enqueue([e] { e->complete(); });
    return e;
  }
  void stream_wait(StreamKind s, const EventPtr& e) override {
    if (s == StreamKind::kCompute) {
      host_wait(e);
      return;
    }
    auto ce = std::static_pointer_cast<CpuEvent>(e);
    stream(s).enqueue([ce] { ce->wait(); });
  }
  double host_wait(const EventPtr& e) override {
    auto ce = std::static_pointer_cast<CpuEvent>(e);
    if (ce->done()) return 0;
    const auto t0 = Clock::now();
    ce->wait();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
  const Ops<float>& ops() override { return cpu_ops<float>(); }
  CopyStats take_copy_stats() override {
    auto [hb, hs] = h2d_.take_stats();
    auto [db, ds] = d2h_.take_stats();
    return {hb, db, hs, ds};
  }

 private:
  CopyStream& stream(StreamKind s) { return s == StreamKind::kH2D ? h2d_ : d2h_; }

  char* memory_ = nullptr;  // the "device": host memory apart from everything else
  DeviceArena arena_;
  CopyStream h2d_, d2h_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& opt) { return std::make_unique<CpuBackend>(opt); }

}  // namespace mt

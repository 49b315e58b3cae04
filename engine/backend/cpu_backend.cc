// CpuBackend: the device is a separate, bounded arena in host memory; H2D, compute and D2H are
// in-order streams, each a worker thread executing its queue (copies optionally throttled to
// an emulated link bandwidth), so enqueueing returns at once and events complete when the work
// before them has run, as on a CUDA stream. The op table enqueues each call of the CPU
// reference ops on the compute stream. A fault hook makes a chosen compute op fail as a device
// fault does: a sticky error, after which no op or copy runs.
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <type_traits>

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
      at_ = Clock::now();
    }
    cv_.notify_all();
  }
  Clock::time_point completed_at() const {
    std::lock_guard<std::mutex> l(mu_);
    return at_;
  }
  void wait() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return done_; });
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Clock::time_point at_{};  // when the stream reached it: the device clock
};

// The sticky device error, and the fault hook that sets it.
class Fault {
 public:
  explicit Fault(std::function<bool(const char*)> inject) : inject_(std::move(inject)) {}
  bool failed() const {
    std::lock_guard<std::mutex> l(mu_);
    return !error_.ok();
  }
  Status error() const {
    std::lock_guard<std::mutex> l(mu_);
    return error_;
  }
  void set(const Status& why) {
    std::lock_guard<std::mutex> l(mu_);
    if (error_.ok()) error_ = why;
  }
  // Called in stream order before each compute op (on the compute worker): whether it may run.
  // The hook is asked without the lock held, so a test's hook may wait for other threads (the
  // optimizer) that read error() meanwhile.
  bool admit_op(const char* name) {
    long n = 0;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!error_.ok()) return false;
      n = ++ops_;
    }
    if (!inject_ || !inject_(name)) return true;
    std::lock_guard<std::mutex> l(mu_);
    if (error_.ok()) error_ = internal_error("compute op " + std::to_string(n) + " (" + name + "): injected device fault");
    return false;
  }

 private:
  mutable std::mutex mu_;
  const std::function<bool(const char*)> inject_;
  long ops_ = 0;
  Status error_;
};

// One in-order stream: a worker thread executing its queue, or (synchronous) the caller.
class Stream {
 public:
  Stream(double gbps, bool synchronous) : gbps_(gbps) {
    if (!synchronous) worker_ = std::thread([this] { loop(); });
  }
  ~Stream() {  // drains the queue, then joins
    if (!worker_.joinable()) return;
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  void enqueue(std::function<void()> task) {
    if (!worker_.joinable()) return task();
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
  std::thread worker_;  // not joinable: synchronous
};

// The op table of the compute stream: each call of the CPU reference ops (of dtype T), arguments
// captured by value, enqueued to run in stream order unless the device has failed.
template <typename T>
class StreamOps final : public Ops<T> {
  using A = acc_t<T>;
  using Base = Ops<T>;

 public:
  StreamOps(Stream& stream, Fault& fault, double delay) : stream_(stream), fault_(fault), delay_(delay) {}

  void matmul_forward(T* out, const T* inp, const T* w, const T* b, int N, int C, int OC) const override {
    post("matmul_forward", &Base::matmul_forward, out, inp, w, b, N, C, OC);
  }
  void matmul_backward(T* dinp, A* dw, A* db, const T* dout, const T* inp, const T* w, int N, int C,
                       int OC) const override {
    post("matmul_backward", &Base::matmul_backward, dinp, dw, db, dout, inp, w, N, C, OC);
  }
  void rmsnorm_forward(T* out, A* rstd, const T* inp, const T* w, int N, int C, float eps,
                       float offset) const override {
    post("rmsnorm_forward", &Base::rmsnorm_forward, out, rstd, inp, w, N, C, eps, offset);
  }
  void rmsnorm_backward(T* dinp, A* dw, const T* dout, const T* inp, const T* w, const A* rstd, int N, int C,
                        float offset) const override {
    post("rmsnorm_backward", &Base::rmsnorm_backward, dinp, dw, dout, inp, w, rstd, N, C, offset);
  }
  void qk_norm_forward(T* qkv, A* rstd, const T* raw, const T* wq, const T* wk, const QkNormShape& s, float eps,
                       float offset) const override {
    post("qk_norm_forward", &Base::qk_norm_forward, qkv, rstd, raw, wq, wk, s, eps, offset);
  }
  void qk_norm_backward(T* draw, A* dwq, A* dwk, const T* dqkv, const T* raw, const T* wq, const T* wk, const A* rstd,
                        const QkNormShape& s, float offset) const override {
    post("qk_norm_backward", &Base::qk_norm_backward, draw, dwq, dwk, dqkv, raw, wq, wk, rstd, s, offset);
  }
  void rope_forward(T* qkv, const float* f, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                    float scale) const override {
    post("rope_forward", &Base::rope_forward, qkv, f, pos, B, T_, H, KVH, D, scale);
  }
  void rope_backward(T* dqkv, const float* f, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                     float scale) const override {
    post("rope_backward", &Base::rope_backward, dqkv, f, pos, B, T_, H, KVH, D, scale);
  }
  void attention_forward(T* out, A* lse, const T* qkv, Documents docs, const AttentionOptions& opt, int B, int T_,
                         int H, int KVH, int D) const override {
    post("attention_forward", &Base::attention_forward, out, lse, qkv, docs, opt, B, T_, H, KVH, D);
  }
  void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const A* lse, Documents docs,
                          const AttentionOptions& opt, int B, int T_, int H, int KVH, int D) const override {
    post("attention_backward", &Base::attention_backward, dqkv, dout, qkv, out, lse, docs, opt, B, T_, H, KVH, D);
  }
  void swiglu_forward(T* out, const T* gu, int N, int F, Activation act) const override {
    post("swiglu_forward", &Base::swiglu_forward, out, gu, N, F, act);
  }
  void swiglu_backward(T* dgu, const T* dout, const T* gu, int N, int F, Activation act) const override {
    post("swiglu_backward", &Base::swiglu_backward, dgu, dout, gu, N, F, act);
  }
  void attention_sinks_forward(T* out, A* lse, const T* sinks, int B, int T_, int H, int D) const override {
    post("attention_sinks_forward", &Base::attention_sinks_forward, out, lse, sinks, B, T_, H, D);
  }
  void attention_sinks_backward(A* dsinks, const T* dout, const T* out, const A* lse, const T* sinks, int B, int T_,
                                int H, int D) const override {
    post("attention_sinks_backward", &Base::attention_sinks_backward, dsinks, dout, out, lse, sinks, B, T_, H, D);
  }
  void moe_route_forward(int32_t* idx, A* w, A* stats, const T* logits, const RouterShape& s) const override {
    post("moe_route_forward", &Base::moe_route_forward, idx, w, stats, logits, s);
  }
  void moe_route_backward(T* dlogits, const A* dw, const T* logits, const int32_t* idx, const A* w, const A* counts,
                          A aux_scale, const RouterShape& s) const override {
    post("moe_route_backward", &Base::moe_route_backward, dlogits, dw, logits, idx, w, counts, aux_scale, s);
  }
  void moe_sort(int32_t* rows, int32_t* offsets, const int32_t* idx, int N, int E, int k) const override {
    post("moe_sort", &Base::moe_sort, rows, offsets, idx, N, E, k);
  }
  void moe_gather(T* out, const T* x, const int32_t* rows, int n, int C, int k) const override {
    post("moe_gather", &Base::moe_gather, out, x, rows, n, C, k);
  }
  void moe_scatter(T* out, const T* y, const int32_t* rows, const A* w, int n, int C, int k) const override {
    post("moe_scatter", &Base::moe_scatter, out, y, rows, w, n, C, k);
  }
  void moe_weight_backward(A* dw, T* dh, T* dy, const T* h, const T* b, const int32_t* rows, const A* w, int n, int F,
                           int C) const override {
    post("moe_weight_backward", &Base::moe_weight_backward, dw, dh, dy, h, b, rows, w, n, F, C);
  }
  void sigmoid_gate_forward(T* out, const T* y, const T* g, int N, int C) const override {
    post("sigmoid_gate_forward", &Base::sigmoid_gate_forward, out, y, g, N, C);
  }
  void sigmoid_gate_backward(T* dy, T* dg, const T* dout, const T* y, const T* g, int N, int C) const override {
    post("sigmoid_gate_backward", &Base::sigmoid_gate_backward, dy, dg, dout, y, g, N, C);
  }
  void embedding_forward(T* out, const int32_t* tokens, const T* wte, int N, int C) const override {
    post("embedding_forward", &Base::embedding_forward, out, tokens, wte, N, C);
  }
  void embedding_backward(A* dwte, const T* dout, const int32_t* tokens, int N, int C) const override {
    post("embedding_backward", &Base::embedding_backward, dwte, dout, tokens, N, C);
  }
  void lm_head_loss(T* dx, A* dW, A* losses, const T* x, const T* W, const int32_t* targets, int N, int C, int V,
                    int chunk, A grad_scale, float softcap, void* scratch, double* totals) const override {
    post("lm_head_loss", &Base::lm_head_loss, dx, dW, losses, x, W, targets, N, C, V, chunk, grad_scale, softcap,
         scratch, totals);
  }
  void add_inplace(T* y, const T* x, size_t n) const override { post("add_inplace", &Base::add_inplace, y, x, n); }
  void scale_inplace(T* y, float s, size_t n) const override { post("scale_inplace", &Base::scale_inplace, y, s, n); }
  void copy_bytes(void* dst, const void* src, size_t bytes) const override {
    post("copy", &Base::copy_bytes, dst, src, bytes);
  }
  void zero_bytes(void* dst, size_t bytes) const override { post("zero", &Base::zero_bytes, dst, bytes); }

 private:
  // The one body behind every op: capture the arguments, run the reference op in stream order.
  template <typename... P>
  void post(const char* name, void (Base::*op)(P...) const, std::type_identity_t<P>... args) const {
    Fault& fault = fault_;
    const double delay = delay_;
    stream_.enqueue([&fault, delay, name, op, args...] {
      if (!fault.admit_op(name)) return;
      const auto t0 = Clock::now();
      (cpu_ops<T>().*op)(args...);
      if (delay > 0) std::this_thread::sleep_until(t0 + std::chrono::duration<double>(delay));
    });
  }

  Stream& stream_;
  Fault& fault_;
  double delay_;
};

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& o)
      : fault_(o.inject_fault),
        h2d_(o.link_gbps, false),
        compute_(0, o.sync_compute),
        d2h_(o.link_gbps, false),
        ops_(compute_, fault_, o.op_delay_seconds),
        ops_bf16_(compute_, fault_, o.op_delay_seconds) {}

  std::string name() const override { return "cpu"; }
  HostAllocator& host_allocator() override { return default_host_allocator(); }

  Status reserve_device(size_t bytes) override {
    if (memory_) return failed_precondition("device arena already reserved");
    memory_.reset(static_cast<char*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096)));
    if (!memory_ && bytes) return resource_exhausted("cannot reserve a device arena of " + std::to_string(bytes) + " bytes");
    arena_.reset(memory_.get(), bytes);
    return Status::Ok();
  }
  Result<void*> device_alloc(size_t bytes) override { return arena_.alloc(bytes); }
  size_t device_capacity() const override { return arena_.capacity(); }
  size_t device_peak() const override { return arena_.used(); }

  void copy_h2d(void* dst, const void* src, size_t bytes) override {
    h2d_.enqueue_copy(bytes, unless_failed([=] { std::memcpy(dst, src, bytes); }));
  }
  void copy_d2h(void* dst, const void* src, size_t bytes) override {
    d2h_.enqueue_copy(bytes, unless_failed([=] { std::memcpy(dst, src, bytes); }));
  }
  void copy_d2h_bf16(bf16* dst, const float* src, size_t n) override {
    d2h_.enqueue_copy(n * sizeof(bf16), unless_failed([=] { round_to_bf16(dst, src, n); }));
  }

  EventPtr record(StreamKind s) override {
    auto e = std::make_shared<CpuEvent>();
    stream(s).enqueue([e] { e->complete(); });
    return e;
  }
  void stream_wait(StreamKind s, const EventPtr& e) override {
    if (!e) return;
    auto ce = std::static_pointer_cast<CpuEvent>(e);
    stream(s).enqueue([ce] { ce->wait(); });
  }
  double host_wait(const EventPtr& e) override {
    if (!e) return 0;
    auto ce = std::static_pointer_cast<CpuEvent>(e);
    if (ce->done()) return 0;
    const auto t0 = Clock::now();
    ce->wait();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
  double elapsed(const EventPtr& from, const EventPtr& to) override {
    if (!from || !to) return 0;
    const auto a = std::static_pointer_cast<CpuEvent>(from)->completed_at();
    const auto b = std::static_pointer_cast<CpuEvent>(to)->completed_at();
    return std::chrono::duration<double>(b - a).count();
  }
  const Ops<float>& ops_fp32() override { return ops_; }
  const Ops<bf16>& ops_bf16() override { return ops_bf16_; }
  CopyStats take_copy_stats() override {
    auto [hb, hs] = h2d_.take_stats();
    auto [db, ds] = d2h_.take_stats();
    return {hb, db, hs, ds};
  }
  Status error() const override { return fault_.error(); }
  void set_error(const Status& why) override { fault_.set(why); }

 private:
  Stream& stream(StreamKind s) {
    return s == StreamKind::kH2D ? h2d_ : s == StreamKind::kCompute ? compute_ : d2h_;
  }
  // A copy that does not run once the device has failed (as no CUDA call does after a sticky
  // error): the host buffer it would have written keeps its old contents.
  std::function<void()> unless_failed(std::function<void()> fn) {
    return [this, fn = std::move(fn)] {
      if (!fault_.failed()) fn();
    };
  }

  // Declared before the streams: their workers drain and join before the memory goes.
  std::unique_ptr<char, FreeDeleter> memory_;  // the "device": host memory apart from everything else
  DeviceArena arena_;
  Fault fault_;
  Stream h2d_, compute_, d2h_;
  StreamOps<float> ops_;
  StreamOps<bf16> ops_bf16_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& opt) { return std::make_unique<CpuBackend>(opt); }

}  // namespace mt

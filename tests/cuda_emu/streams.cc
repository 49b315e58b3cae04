// Streams and events of the emulated device (streams.h): per-stream queues of work, run late
// (or copies early). One host thread at a time runs work (g_run); queues and events are guarded
// by g_mu, which is never held while work runs, so other host threads go on queueing.
#include "tests/cuda_emu/streams.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace mt_emu {

Order order() {
  static const Order o = [] {
    const char* v = std::getenv("MT_CUDA_EMU_ORDER");
    const std::string name = v ? v : "late";
    if (name == "late") return Order::kLate;
    if (name == "copies-first") return Order::kCopiesFirst;
    if (name == "kernels-first") return Order::kKernelsFirst;
    if (name == "eager") return Order::kEager;
    std::fprintf(stderr, "cuda_emu: MT_CUDA_EMU_ORDER=%s is not late, copies-first, kernels-first or eager\n", v);
    std::abort();
  }();
  return o;
}
namespace {

struct Queue;
using QueuePtr = std::shared_ptr<Queue>;

// A kernel (or library call), a copy (or fill, or free), or a marker (an event's record, a wait).
enum class Kind { kKernel, kCopy, kMarker };

// A queued piece of work, or (after set) a wait for another queue to reach a point.
struct Op {
  uint64_t seq = 0;    // this queue's count, from 1
  uint64_t order = 0;  // the device's count: which was queued last
  std::function<void()> work;
  Kind kind = Kind::kMarker;
  QueuePtr after;  // a wait: `after` must have run through after_seq first
  uint64_t after_seq = 0;
};

struct Queue {
  bool blocking = true;  // ordered with the legacy default stream
  std::deque<Op> ops;
  uint64_t queued = 0, done = 0;  // the last seq queued, and run
};

// An event's last record: the queue and its point, when that point ran, and whether a query
// has answered "not ready" for this record yet.
struct EventState {
  QueuePtr queue;
  uint64_t seq = 0;
  std::shared_ptr<std::chrono::steady_clock::time_point> ran_at;
  bool answered_not_ready = false;
};

std::mutex g_mu;   // the queues, the stream table, the events
std::mutex g_run;  // held by the host thread running work
uint64_t g_order = 0;
// What the laziness did, for MT_CUDA_EMU_STATS=1 (printed at exit): ops queued, the most
// waiting at once, and the not-ready answers given.
uint64_t g_pending = 0, g_most_pending = 0, g_not_ready = 0;
const QueuePtr g_legacy = std::make_shared<Queue>();
// Every stream but the legacy one: created ones until destroyed (their work run first), each host
// thread's per-thread default stream for good (its work still runs after the thread ends).
std::set<QueuePtr> g_all;

bool eager() { return order() == Order::kEager; }

// A created stream's handle is its Queue's shared_ptr, heap-held; the legacy default stream
// (nullptr, cudaStreamLegacy) is one queue, the per-thread default stream one per host thread
// (blocking, as CUDA's is). Called without g_mu held.
QueuePtr queue_of(cudaStream_t s) {
  if (!s || s == cudaStreamLegacy) return g_legacy;
  if (s == cudaStreamPerThread) {
    thread_local QueuePtr mine;
    if (!mine) {
      mine = std::make_shared<Queue>();
      std::lock_guard<std::mutex> lock(g_mu);
      g_all.insert(mine);
    }
    return mine;
  }
  return *reinterpret_cast<QueuePtr*>(s);
}
EventState& state_of(cudaEvent_t e) { return *reinterpret_cast<EventState*>(e); }

void print_stats() {
  std::fprintf(stderr, "cuda_emu streams: %llu ops queued, at most %llu waiting at once, %llu not-ready answers\n",
               static_cast<unsigned long long>(g_order), static_cast<unsigned long long>(g_most_pending),
               static_cast<unsigned long long>(g_not_ready));
}

void push(const QueuePtr& q, Op op) {  // g_mu held
  static const bool stats = [] {
    const char* v = std::getenv("MT_CUDA_EMU_STATS");
    return v && *v && *v != '0' && std::atexit(print_stats) == 0;
  }();
  (void)stats;
  g_most_pending = std::max(g_most_pending, ++g_pending);
  op.seq = ++q->queued;
  op.order = ++g_order;
  q->ops.push_back(std::move(op));
}
void push_wait(const QueuePtr& q, const QueuePtr& on, uint64_t seq) {  // g_mu held
  if (on->done >= seq || on == q) return;
  Op w;
  w.after = on;
  w.after_seq = seq;
  push(q, std::move(w));
}

// Runs op, popped from q, and marks q done through it. g_run held, g_mu not.
void run_op(const QueuePtr& q, Op op) {
  if (op.work) op.work();
  std::lock_guard<std::mutex> lock(g_mu);
  q->done = op.seq;
  --g_pending;
}

// Runs q through `seq`; g_run held, g_mu not.
void run_through(const QueuePtr& q, uint64_t seq) {
  for (;;) {
    Op op;
    {
      std::lock_guard<std::mutex> lock(g_mu);
      if (q->done >= seq || q->ops.empty()) return;
      op = std::move(q->ops.front());
      q->ops.pop_front();
    }
    if (op.after) run_through(op.after, op.after_seq);
    run_op(q, std::move(op));
  }
}

std::vector<QueuePtr> all_queues() {  // g_mu not held
  std::vector<QueuePtr> queues{g_legacy};
  std::lock_guard<std::mutex> lock(g_mu);
  queues.insert(queues.end(), g_all.begin(), g_all.end());
  return queues;
}

// Copies first: every queue whose next op is a copy, a marker or a met wait runs it, until none
// does (kernels wait to be needed). g_run held, g_mu not.
void run_copies() {
  for (bool ran = true; ran;) {
    ran = false;
    for (const QueuePtr& q : all_queues())
      for (;;) {
        Op op;
        {
          std::lock_guard<std::mutex> lock(g_mu);
          if (q->ops.empty()) break;
          const Op& head = q->ops.front();
          if (head.kind == Kind::kKernel || (head.after && head.after->done < head.after_seq)) break;
          op = std::move(q->ops.front());
          q->ops.pop_front();
        }
        run_op(q, std::move(op));
        ran = true;
      }
  }
}

// Kernels first: every queue whose next op is a kernel, a marker or a wait runs through it, what
// it waits for first (copies run when a kernel needs them), until none does: a copy that reads
// what a later kernel overwrites, with no wait between them, meets the overwritten data.
void run_kernels() {
  for (bool ran = true; ran;) {
    ran = false;
    for (const QueuePtr& q : all_queues()) {
      uint64_t seq = 0;
      {
        std::lock_guard<std::mutex> lock(g_mu);
        if (q->ops.empty() || q->ops.front().kind == Kind::kCopy) continue;
        seq = q->ops.front().seq;
      }
      run_through(q, seq);
      ran = true;
    }
  }
}

// The early half of the order, after a forced run or a new op. g_run held.
void run_early() {
  if (order() == Order::kCopiesFirst) run_copies();
  if (order() == Order::kKernelsFirst) run_kernels();
}

// Runs q through seq, then what the order runs early.
void run_now(const QueuePtr& q, uint64_t seq) {
  std::lock_guard<std::mutex> run(g_run);
  run_through(q, seq);
  run_early();
}

// Queues the op on s and returns its place there.
uint64_t enqueue_op(cudaStream_t s, std::function<void()> work, Kind kind) {
  const QueuePtr q = queue_of(s);
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (q == g_legacy) {
      for (const QueuePtr& other : g_all)
        if (other->blocking) push_wait(q, other, other->queued);
    } else if (q->blocking) {
      push_wait(q, g_legacy, g_legacy->queued);
    }
    Op op;
    op.work = std::move(work);
    op.kind = kind;
    push(q, std::move(op));
    seq = q->queued;
  }
  if (order() == Order::kCopiesFirst || order() == Order::kKernelsFirst) {
    std::unique_lock<std::mutex> run(g_run, std::try_to_lock);  // a busy runner runs them after
    if (run.owns_lock()) run_early();
  }
  return seq;
}

}  // namespace

void enqueue(cudaStream_t s, std::function<void()> work, bool kernel) {
  if (eager()) {
    std::lock_guard<std::mutex> run(g_run);
    work();
    return;
  }
  enqueue_op(s, std::move(work), kernel ? Kind::kKernel : Kind::kCopy);
}

void run_stream(cudaStream_t s) {
  const QueuePtr q = queue_of(s);
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    seq = q->queued;
  }
  run_now(q, seq);
}

// Newest work first: the queue whose next op was queued last runs through that op, and again.
void run_device() {
  std::lock_guard<std::mutex> run(g_run);
  for (;;) {
    QueuePtr q;
    uint64_t seq = 0, order = 0;
    const std::vector<QueuePtr> queues = all_queues();
    {
      std::lock_guard<std::mutex> lock(g_mu);
      for (const QueuePtr& c : queues)
        if (!c->ops.empty() && c->ops.front().order > order)
          q = c, seq = c->ops.front().seq, order = c->ops.front().order;
    }
    if (!q) return;
    run_through(q, seq);
    run_early();
  }
}

cudaStream_t create_stream(bool blocking) {
  auto* handle = new QueuePtr(std::make_shared<Queue>());
  (*handle)->blocking = blocking;
  std::lock_guard<std::mutex> lock(g_mu);
  g_all.insert(*handle);
  return reinterpret_cast<cudaStream_t>(handle);
}

void destroy_stream(cudaStream_t s) {
  if (!s || s == cudaStreamLegacy || s == cudaStreamPerThread) return;
  run_stream(s);
  auto* handle = reinterpret_cast<QueuePtr*>(s);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_all.erase(*handle);
  }
  delete handle;
}

cudaEvent_t create_event() { return reinterpret_cast<cudaEvent_t>(new EventState); }
void destroy_event(cudaEvent_t e) { delete &state_of(e); }  // a queued record keeps its own time

void record_event(cudaEvent_t e, cudaStream_t s) {
  auto at = std::make_shared<std::chrono::steady_clock::time_point>();
  auto work = [at] { *at = std::chrono::steady_clock::now(); };
  const QueuePtr q = queue_of(s);
  uint64_t seq = 0;
  if (eager()) {
    work();
  } else {
    seq = enqueue_op(s, work, Kind::kMarker);
  }
  std::lock_guard<std::mutex> lock(g_mu);
  EventState& ev = state_of(e);
  ev.queue = q;
  ev.seq = seq;
  ev.ran_at = at;
  ev.answered_not_ready = false;
}

void stream_wait_event(cudaStream_t s, cudaEvent_t e) {
  if (eager()) return;
  const QueuePtr q = queue_of(s);
  std::lock_guard<std::mutex> lock(g_mu);
  const EventState& ev = state_of(e);
  if (ev.queue) push_wait(q, ev.queue, ev.seq);
}

cudaError_t query_event(cudaEvent_t e) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    EventState& ev = state_of(e);
    if (!ev.queue || ev.queue->done >= ev.seq) return cudaSuccess;
    if (!ev.answered_not_ready) {
      ev.answered_not_ready = true;
      ++g_not_ready;
      return cudaErrorNotReady;
    }
  }
  run_event(e);
  return cudaSuccess;
}

void run_event(cudaEvent_t e) {
  QueuePtr q;
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    q = state_of(e).queue;
    seq = state_of(e).seq;
  }
  if (q) run_now(q, seq);
}

bool event_time(cudaEvent_t e, std::chrono::steady_clock::time_point* at) {
  std::lock_guard<std::mutex> lock(g_mu);
  const EventState& ev = state_of(e);
  if (!ev.queue || ev.queue->done < ev.seq) return false;
  *at = *ev.ran_at;
  return true;
}

}  // namespace mt_emu

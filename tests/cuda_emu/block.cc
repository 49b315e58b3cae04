// The emulation's scheduler (see cuda_emu.h): a block's CUDA threads are fibers run in turn,
// each until it waits at a barrier or returns, and then it hands the thread over to the next
// ready fiber itself (no trip through the scheduler). Blocks run last first, every other one
// with its threads in reverse order. A barrier opens when its last lane
// arrives; nothing ready while some thread still waits is a deadlock on a GPU too (or undefined
// behaviour) and stops the process naming the kernel and the thread. Also: the launch's checks,
// the thread's last error, and cudaFuncSetAttribute's shared-memory limits.
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "tests/cuda_emu/block.h"
#include "tests/cuda_emu/streams.h"

namespace mt_emu {

namespace detail {
thread_local const ThreadState* current_state = nullptr;
void outside_kernel() {
  std::fprintf(stderr, "cuda_emu: threadIdx or a warp intrinsic used outside a kernel\n");
  std::abort();
}
}  // namespace detail

namespace {

constexpr size_t kStackBytes = 512 * 1024;
constexpr size_t kGuardBytes = 4096;
constexpr size_t kMaxDynamicShared = 227 * 1024;  // sm_90's opt-in limit per block
constexpr size_t kDefaultDynamicShared = 48 * 1024;

thread_local Block* g_block = nullptr;
thread_local Fiber* g_fiber = nullptr;
thread_local cudaError_t g_last_error = cudaSuccess;
thread_local char* g_stacks = nullptr;
thread_local size_t g_stack_count = 0;

std::mutex g_attr_mu;
std::unordered_map<const void*, int> g_max_dynamic_shared;

void become(Fiber* f) {
  g_fiber = f;
  detail::current_state = f ? &f->state : nullptr;
}

char* stack_of(int i, int n) {
  if (size_t(n) > g_stack_count) {
    if (g_stacks) munmap(g_stacks, g_stack_count * kStackBytes);
    void* p = mmap(nullptr, size_t(n) * kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) fail("mmap of fiber stacks failed");
    // The lowest page of each stack is a guard: a kernel overflowing its stack faults there
    // instead of writing over the next thread's.
    for (size_t i = 0; i < size_t(n); ++i)
      if (mprotect(static_cast<char*>(p) + i * kStackBytes, kGuardBytes, PROT_NONE) != 0)
        fail("mprotect of a fiber stack's guard page failed");
    g_stacks = static_cast<char*>(p);
    g_stack_count = size_t(n);
  }
  return g_stacks + size_t(i) * kStackBytes;
}

void make_ready(Block& b, Fiber& f) {
  f.wait = Wait::kRunnable;
  b.ready.push_back(f.tid);
}

void release_block_barrier(Block& b) {
  const int n = int(b.fibers.size());
  for (int i = 0; i < n; ++i) {
    Fiber& f = b.fibers[size_t(b.reverse ? n - 1 - i : i)];
    if (f.wait == Wait::kBlock) make_ready(b, f);
  }
  b.at_block = 0;
}

// Fiber f has just begun to wait (or returned): the barriers its arrival opens.
void arrive(Block& b, Fiber& f) {
  const int w = f.tid / 32;
  const unsigned bit = 1u << (f.tid & 31);
  if (f.wait == Wait::kWarp) {
    const unsigned m = f.mask;
    if (m & ~lanes_of_warp(b, w)) fail("a warp collective's mask names a lane the block does not have");
    if (m & b.exited[size_t(w)]) fail("a warp collective's mask names a lane that has exited");
    b.waiting[size_t(w)] |= bit;
    if ((b.waiting[size_t(w)] & m) != m) return;
    for (int i = 0; i < 32; ++i) {
      const int l = b.reverse ? 31 - i : i;
      if (!(m >> l & 1u)) continue;
      Fiber& o = b.fibers[size_t(32 * w + l)];
      if (o.mask != m) fail("lanes of one warp wait at warp barriers with different masks");
      if (o.op != f.op) fail("lanes of one warp meet in different warp collectives (e.g. __syncwarp and a shuffle)");
      make_ready(b, o);
    }
    b.waiting[size_t(w)] &= ~m;
  } else if (f.wait == Wait::kBlock) {
    if (++b.at_block == b.live) release_block_barrier(b);
  } else if (f.wait == Wait::kDone) {
    --b.live;
    b.exited[size_t(w)] |= bit;
    for (int l = 0; l < 32; ++l)
      if ((b.waiting[size_t(w)] >> l & 1u) && (b.fibers[size_t(32 * w + l)].mask & bit))
        fail("a lane exited while others wait for it at a warp collective");
    if (b.at_block > 0 && b.at_block == b.live) release_block_barrier(b);
  }
}

// The next ready fiber, or nullptr.
Fiber* next_ready(Block& b) {
  if (b.head == b.ready.size()) return nullptr;
  Fiber* f = &b.fibers[size_t(b.ready[b.head++])];
  if (b.head > 4096 && b.head * 2 > b.ready.size()) {  // keep the queue short
    b.ready.erase(b.ready.begin(), b.ready.begin() + long(b.head));
    b.head = 0;
  }
  return f;
}

// After fiber f waits or returns: run the next ready fiber in its place (f itself, when it is
// the one; the scheduler when none is).
void hand_over(Block& b, Fiber& f) {
  arrive(b, f);
  Fiber* next = next_ready(b);
  if (next == &f) return;
  Context& to = next ? next->ctx : b.scheduler;
  become(next);
  if (f.wait == Wait::kDone) jump_for_good(f.ctx, to);
  jump(f.ctx, to);  // back when another fiber hands over to f
}

[[noreturn]] void fiber_main() {
  arrived();
  (*g_block->body)();
  Fiber& f = *g_fiber;
  f.wait = Wait::kDone;
  hand_over(*g_block, f);
  std::abort();  // a returned fiber is never resumed
}

void run_block(Block& b) {
  const int n = int(b.fibers.size()), warps = (n + 31) / 32;
  for (int t = 0; t < n; ++t) {
    Fiber& f = b.fibers[size_t(t)];
    f.wait = Wait::kRunnable;
    f.parity = 0;
    f.memo_calls = 0;
    make_context(f.ctx, stack_of(t, n), kStackBytes, fiber_main);
  }
  b.ready.resize(size_t(n));
  for (int t = 0; t < n; ++t) b.ready[size_t(t)] = b.reverse ? n - 1 - t : t;
  b.head = 0;
  b.waiting.assign(size_t(warps), 0u);
  b.exited.assign(size_t(warps), 0u);
  b.live = n;
  b.at_block = 0;
  b.memo.assign(size_t(warps), {});
  if (b.shared) std::memset(b.shared.get(), 0xff, b.shared_bytes);  // NaN in fp32 and bf16
  b.statics.clear();
  Fiber* first = next_ready(b);
  become(first);
  jump(b.scheduler, first->ctx);  // back when no fiber is ready
  if (b.live == 0) {
    for (const auto& m : b.memo)
      if (!m.empty()) fail("a warp-wide matrix operation (WMMA) that not every lane of its warp made");
    return;
  }
  for (Fiber& f : b.fibers)
    if (f.wait == Wait::kWarp || f.wait == Wait::kBlock) {
      become(&f);
      fail(f.wait == Wait::kWarp ? "deadlock: a warp barrier some lane never reaches (it waits in __syncthreads)"
                                 : "deadlock: __syncthreads that some live thread never reaches");
    }
}

bool bad_config(const Config& c, const void* kernel) {
  const size_t threads = size_t(c.block.x) * c.block.y * c.block.z;
  if (threads == 0 || threads > 1024 || c.block.z > 64) return true;
  if (c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0 || c.grid.x > 0x7fffffffu || c.grid.y > 65535 ||
      c.grid.z > 65535)
    return true;
  if (c.smem > kMaxDynamicShared) return true;
  if (c.smem > kDefaultDynamicShared) {
    std::lock_guard<std::mutex> lock(g_attr_mu);
    auto it = g_max_dynamic_shared.find(kernel);
    if (it == g_max_dynamic_shared.end() || size_t(it->second) < c.smem) return true;
  }
  return false;
}

}  // namespace

Block& block() {
  if (!g_block) fail("a device-side call outside a kernel");
  return *g_block;
}
Fiber& fiber() {
  if (!g_fiber) fail("a device-side call outside a kernel");
  return *g_fiber;
}

void fail(const char* what) {
  const Fiber* f = g_fiber;
  if (f)
    std::fprintf(stderr, "cuda_emu: %s in kernel %s, block (%u,%u,%u), thread (%u,%u,%u)\n", what, g_block->kernel,
                 f->state.block_idx.x, f->state.block_idx.y, f->state.block_idx.z, f->state.thread_idx.x,
                 f->state.thread_idx.y, f->state.thread_idx.z);
  else
    std::fprintf(stderr, "cuda_emu: %s in kernel %s\n", what, g_block ? g_block->kernel : "?");
  std::abort();
}

void device_error(const char* what) { fail(what); }

void check_launch_bounds(int max_threads, int) {
  const dim3 b = self().block_dim;
  if (int(b.x * b.y * b.z) > max_threads) fail("a block larger than the kernel's __launch_bounds__");
}

void wait_at(Wait w) {
  Fiber& f = fiber();
  f.wait = w;
  hand_over(*g_block, f);
}

unsigned lanes_of_warp(const Block& b, int w) {
  const int n = int(b.fibers.size()) - 32 * w;
  return n >= 32 ? 0xffffffffu : (1u << n) - 1u;
}

// A launch's configuration is checked when it is made (a bad one fails without running, as
// CUDA's does); the kernel runs when its stream gets to it (streams.h).
void launch(const Config& c, const void* kernel, const char* name, const std::function<void()>& body) {
  if (g_block) fail("a kernel launched from a kernel");
  if (bad_config(c, kernel)) {
    g_last_error = cudaErrorInvalidConfiguration;
    return;
  }
  enqueue(c.stream, [c, name, body] { run_kernel(c, name, body); }, true);
}

void run_kernel(const Config& c, const char* name, const std::function<void()>& body) {
  Block b;
  b.kernel = name;
  b.body = &body;
  this_thread_context(b.scheduler);
  const int n = int(c.block.x * c.block.y * c.block.z);
  b.fibers.resize(size_t(n));
  b.slots.resize(3 * size_t(n));
  if (c.smem > 0) {
    void* p = nullptr;
    if (posix_memalign(&p, 128, c.smem) != 0) fail("no host memory for the block's shared memory");
    b.shared.reset(static_cast<unsigned char*>(p));
    b.shared_bytes = c.smem;
  }
  for (int t = 0; t < n; ++t) {
    ThreadState& s = b.fibers[size_t(t)].state;
    s.thread_idx = make_uint3(unsigned(t) % c.block.x, unsigned(t) / c.block.x % c.block.y,
                              unsigned(t) / (c.block.x * c.block.y));
    s.block_dim = c.block;
    s.grid_dim = c.grid;
    s.lane = t & 31;
    b.fibers[size_t(t)].tid = t;
  }
  g_block = &b;
  // Blocks last first, and every other block's threads highest first (started and released so):
  // a kernel that reads what another thread or block writes without a barrier between them sees
  // it unwritten in one order or the other (one fixed order would hide it).
  const uint64_t blocks = uint64_t(c.grid.x) * c.grid.y * c.grid.z;
  for (uint64_t i = blocks; i-- > 0;) {
    const auto x = unsigned(i % c.grid.x), y = unsigned(i / c.grid.x % c.grid.y), z = unsigned(i / c.grid.x / c.grid.y);
    for (Fiber& f : b.fibers) f.state.block_idx = make_uint3(x, y, z);
    b.reverse = i % 2 == 1;
    run_block(b);
  }
  g_block = nullptr;
  become(nullptr);
}

void set_last_error(cudaError_t e) { g_last_error = e; }
cudaError_t take_last_error() {
  const cudaError_t e = g_last_error;
  g_last_error = cudaSuccess;
  return e;
}
cudaError_t peek_last_error() { return g_last_error; }

cudaError_t set_max_dynamic_shared(const void* kernel, int bytes) {
  if (bytes < 0 || size_t(bytes) > kMaxDynamicShared) return g_last_error = cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(g_attr_mu);
  g_max_dynamic_shared[kernel] = bytes;
  return cudaSuccess;
}

}  // namespace mt_emu

// CUDA emulation on the CPU, for testing our kernels where no GPU is: force-included (-include)
// before every kernels/cuda/*.cu that tests/cuda_emu/host_compile.py has rewritten into C++ and
// before the CUDA tests compiled against them.
//  * Each CUDA thread of a block is a fiber; blocks run one after another, last first, every
//    other one with its threads highest first (so a read of another thread's or block's write
//    without a barrier between them meets it unwritten in one order or the other).
//  * Barriers (__syncthreads, __syncwarp) and warp collectives (shuffles, votes) are real
//    rendezvous points. What CUDA leaves undefined — a collective whose mask names an exited
//    lane, a shuffle reading outside its mask, lanes at different barriers, in different kinds
//    of collective or with different masks — stops the process naming the kernel, block, thread.
//  * Device memory is host memory (under ASan every access out of an allocation is caught);
//    shared memory (dynamic, and the static arrays host_compile.py rewrites) is allocated per
//    block to its exact size and starts as NaN. A launch's arguments are evaluated once, its
//    configuration checked at once; the kernel runs when its stream gets to it (streams.h:
//    as late as the host's waits allow, so a missing stream or event dependency, or a host
//    touching a pinned buffer whose copy has not run, meets unwritten or overwritten data).
//  * WMMA fragments hold the whole 16x16 tile in every lane (kernels must not assume a layout;
//    ours probe it); a store writes each lane's share only.
//  * A kernel's pointer arguments, and cuBLASLt's operands, must be device or mapped host
//    memory (runtime_emu.cc keeps the allocations); a pageable host address stops the process,
//    and so does a block larger than the kernel's __launch_bounds__.
// What this cannot find: data races between threads (a fiber runs until it waits), a kernel
// reaching host memory through a pointer held in a struct argument or in device memory (both
// are host memory here; copies and fills do check their sides), timing, NCCL, and cuDNN's own
// engines (cudnn_emu.cc interprets its graphs). It checks indexing, bounds, the
// choice of barriers, the streams' ordering and the arithmetic — not speed.
#pragma once

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static thread_local

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>

namespace mt_emu {

struct ThreadState {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
  int lane;
};
namespace detail {
extern thread_local const ThreadState* current_state;
[[noreturn]] void outside_kernel();
}  // namespace detail
// The state of the CUDA thread running now (the current fiber's).
inline const ThreadState& self() {
  const ThreadState* s = detail::current_state;
  if (!s) detail::outside_kernel();
  return *s;
}
inline int lane_id() { return self().lane; }

// A kernel's __launch_bounds__ (host_compile.py calls this first in its body): a block of more
// threads than `max_threads` stops the process (a GPU refuses the launch).
void check_launch_bounds(int max_threads, int min_blocks = 0);
void sync_threads();
void sync_warp(unsigned mask);
// Publishes `bits` for this lane, waits for the lanes of `mask`, returns lane `src`'s bits.
uint64_t warp_exchange(unsigned mask, uint64_t bits, int src);
// The same rendezvous; returns the lanes of `mask` whose pred is true (ballot, any, all).
unsigned warp_vote(unsigned mask, bool pred);
void* dynamic_shared();
// A static __shared__ array of the block (host_compile.py rewrites the declaration): its own
// per block and per declaration `site`, exactly `bytes` long, filled with 0xff at block start.
void* static_shared_bytes(const char* site, size_t bytes, size_t align);
template <typename A>
A& static_shared(const char* site) {
  return *static_cast<A*>(static_shared_bytes(site, sizeof(A), alignof(A)));
}
// A warp-wide operation every lane computes alike (WMMA's mma_sync): the first lane of a warp to
// make its n-th call computes and puts the result; the others find it (their operands compared:
// lanes that pass different ones stop the process). One computation per warp, not per lane.
bool warp_memo_find(const void* in, size_t in_bytes, void* out, size_t out_bytes);
void warp_memo_put(const void* in, size_t in_bytes, const void* out, size_t out_bytes);

struct Config {
  Config(dim3 g, dim3 b, size_t s = 0, cudaStream_t st = nullptr) : grid(g), block(b), smem(s), stream(st) {}
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
};
// Runs `body` (the kernel call) once per thread of every block; sets the thread's last error the
// way a real launch does (a bad configuration fails without running anything).
void launch(const Config& c, const void* kernel, const char* name, const std::function<void()>& body);

// A kernel argument that is a pointer must be null or point into device memory or mapped host
// memory (an allocation, or one past its end): a GPU faults on a pageable host address, so this
// stops the process naming the kernel and the argument (runtime_emu.cc).
void check_kernel_pointer(const char* kernel, int index, const void* p);
// The same for a library call's operand of `bytes` (one allocation must hold it all).
void check_device_range(const char* call, const char* operand, const void* p, size_t bytes);
template <typename Tuple>
void check_kernel_args(const char* kernel, const Tuple& args) {
  std::apply(
      [&](const auto&... a) {
        int i = 0;
        auto one = [&](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_pointer_v<V> && !std::is_function_v<std::remove_pointer_t<V>>)
            check_kernel_pointer(kernel, i, static_cast<const void*>(v));
          ++i;
        };
        (one(a), ...);
      },
      args);
}
// What host_compile.py makes of kernel<<<c>>>(args): the arguments, evaluated once, checked and
// kept; `call` runs the kernel on them.
template <typename Tuple, typename Call>
void launch_kernel(const Config& c, const void* kernel, const char* name, Tuple args, Call call) {
  check_kernel_args(name, args);
  launch(c, kernel, name, [args = std::move(args), call] { std::apply(call, args); });
}

// Stops the process naming the kernel, block and thread: what a GPU would fault on or leave
// undefined (wmma_emu.h's alignment rules).
[[noreturn]] void device_error(const char* what);

// The thread's last error (cudaGetLastError's), and cudaFuncSetAttribute's shared-memory limit.
void set_last_error(cudaError_t e);
cudaError_t take_last_error();
cudaError_t peek_last_error();
cudaError_t set_max_dynamic_shared(const void* kernel, int bytes);

template <typename T>
T shuffle(unsigned mask, T v, int src) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  const uint64_t got = warp_exchange(mask, bits, src);
  T r;
  std::memcpy(&r, &got, sizeof(T));
  return r;
}

}  // namespace mt_emu

#define threadIdx (::mt_emu::self().thread_idx)
#define blockIdx (::mt_emu::self().block_idx)
#define blockDim (::mt_emu::self().block_dim)
#define gridDim (::mt_emu::self().grid_dim)
#define warpSize 32

// cuda_runtime.h's typed overload is nvcc's alone.
template <typename F>
cudaError_t cudaFuncSetAttribute(F* kernel, cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}

inline void __syncthreads() { ::mt_emu::sync_threads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::mt_emu::sync_warp(mask); }

template <typename T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  const int lane = ::mt_emu::lane_id(), base = lane & ~(width - 1);
  return ::mt_emu::shuffle(mask, v, base + (src & (width - 1)));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const int lane = ::mt_emu::lane_id(), base = lane & ~(width - 1), src = lane ^ lane_mask;
  return ::mt_emu::shuffle(mask, v, src >= base + width ? lane : src);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = ::mt_emu::lane_id(), base = lane & ~(width - 1), src = lane + int(delta);
  return ::mt_emu::shuffle(mask, v, src >= base + width ? lane : src);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = ::mt_emu::lane_id(), base = lane & ~(width - 1), src = lane - int(delta);
  return ::mt_emu::shuffle(mask, v, src < base ? lane : src);
}
inline unsigned __ballot_sync(unsigned mask, int pred) { return ::mt_emu::warp_vote(mask, pred != 0); }
inline int __any_sync(unsigned mask, int pred) { return ::mt_emu::warp_vote(mask, pred != 0) != 0; }
inline int __all_sync(unsigned mask, int pred) { return ::mt_emu::warp_vote(mask, pred != 0) == mask; }

// Device math the host headers lack.
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }

#include "tests/cuda_emu/wmma_emu.h"

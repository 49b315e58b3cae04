// Backend: the device interface the streaming executor runs on — a bounded device arena,
// three streams (host-to-device copies, compute, device-to-host copies), events that order
// them, and the op table for the compute stream. CpuBackend implements it with worker threads
// (and an optional emulated link bandwidth); CudaBackend with CUDA streams, events and cuBLAS.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>

#include "engine/base/host_memory.h"
#include "engine/backend/ops.h"
#include "engine/base/status.h"
#include "kernels/bf16.h"

namespace mt {

enum class StreamKind { kH2D = 0, kCompute = 1, kD2H = 2 };

// A point in one stream's work; complete once everything enqueued before it has run.
class Event {
 public:
  virtual ~Event() = default;
  virtual bool done() const = 0;
};
using EventPtr = std::shared_ptr<Event>;

// The bump allocator both backends run inside the device memory they reserve up front: regions
// are kAlign-aligned and never freed, so the high-water mark is simply what has been handed out.
// (The planner's workspace entry carries slack for this alignment.)
class DeviceArena {
 public:
  static constexpr size_t kAlign = 256;
  void reset(char* base, size_t capacity) {
    base_ = base;
    capacity_ = capacity;
    used_ = 0;
  }
  Result<void*> alloc(size_t bytes) {
    const size_t off = (used_ + kAlign - 1) / kAlign * kAlign;
    if (off + bytes > capacity_)
      return resource_exhausted("device arena exhausted: " + std::to_string(off + bytes) + " bytes needed, " +
                                std::to_string(capacity_) + " reserved");
    used_ = off + bytes;
    return static_cast<void*>(base_ + off);
  }
  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }

 private:
  char* base_ = nullptr;
  size_t capacity_ = 0, used_ = 0;
};

struct CopyStats {
  uint64_t h2d_bytes = 0, d2h_bytes = 0;
  double h2d_seconds = 0, d2h_seconds = 0;  // time each copy engine was busy
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Host memory for HostStore (pinned where the backend can pin).
  virtual HostAllocator& host_allocator() = 0;

  // Device memory: one arena of `bytes` reserved up front; allocations bump inside it and
  // never exceed it. The peak is what a run really used.
  virtual Status reserve_device(size_t bytes) = 0;
  virtual Result<void*> device_alloc(size_t bytes) = 0;
  virtual size_t device_capacity() const = 0;
  virtual size_t device_peak() const = 0;

  // Asynchronous copies on the H2D / D2H streams.
  virtual void copy_h2d(void* device_dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_d2h(void* host_dst, const void* device_src, size_t bytes) = 0;
  // Device fp32 -> host bf16 (compact gradients): converts, then copies half the bytes.
  virtual void copy_d2h_bf16(bf16* host_dst, const float* device_src, size_t n) = 0;

  virtual EventPtr record(StreamKind stream) = 0;
  // Work enqueued on `stream` after this call runs only once `e` is complete.
  virtual void stream_wait(StreamKind stream, const EventPtr& e) = 0;
  // Blocks the calling thread until `e` completes; returns the seconds it waited.
  virtual double host_wait(const EventPtr& e) = 0;
  // Seconds from `from` to `to` on the device's own clock (cudaEventElapsedTime; the CPU
  // backend's workers stamp each event as it completes). Both must be complete; 0 if either
  // is null.
  virtual double elapsed(const EventPtr& from, const EventPtr& to) = 0;

  // Ops are enqueued on the compute stream and return at once; record(kCompute) marks when
  // they have run.
  // Whether this backend's kernels run a model with this attention head size (ggml's
  // supports_op, for the one shape that limits us): checked before any memory is reserved.
  virtual Status supports_head_dim(int head_dim) const { return Status::Ok(); }
  // One op table per compute dtype (ops.h), both on the compute stream.
  virtual const Ops<float>& ops_fp32() = 0;
  virtual const Ops<bf16>& ops_bf16() = 0;
  template <typename T = float>
  const Ops<T>& ops() {
    if constexpr (std::is_same_v<T, bf16>) return ops_bf16();
    else return ops_fp32();
  }
  virtual CopyStats take_copy_stats() = 0;  // since the last call
  // For a communicator that enqueues on this backend's streams (NCCL): the device index and the
  // native stream behind `s` (a cudaStream_t on CUDA); -1 and null where there is none (CPU).
  virtual int device_index() const { return -1; }
  virtual void* native_stream(StreamKind s) { return nullptr; }
  // The first failure of a void call above (a device backend cannot return it there); sticky:
  // once set, the device's later work is suspect. Events still complete (nothing waits
  // forever), so whoever consumes a device result after an event checks this first.
  virtual Status error() const { return Status::Ok(); }
  // Makes `why` the sticky error above, unless one is set: work another component enqueued on
  // this backend's streams has failed — a collective its communicator aborted (NCCL's watchdog) —
  // so what that work wrote is suspect, as after a device fault. Whoever checks error() before
  // using a result (the optimizer, the step) then refuses it.
  virtual void set_error(const Status& why) = 0;
};

struct CpuBackendOptions {
  double link_gbps = 0;  // emulated bandwidth per direction in GB/s (1e9 B/s); 0 = memcpy speed
  // Compute runs on the calling thread and record(kCompute) is complete at once (stream_wait
  // blocks the caller): for debugging, where a fault's stack should show the op's caller.
  // Default: a worker thread, with the semantics of a CUDA stream.
  bool sync_compute = false;
  // Fault injection: asked in stream order before each compute op, with the op's name; true
  // makes that op set the sticky error instead of running, as a device fault would, and from
  // then on no op or copy runs. Unset: never.
  std::function<bool(const char* op)> inject_fault;
  // A slowed compute worker (timing tests): each compute op takes this much longer.
  double op_delay_seconds = 0;
};

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& opt);

}  // namespace mt

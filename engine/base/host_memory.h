// Host memory: the allocator interface a backend supplies (pinned where it can pin, so every
// byte is DMA-able) and an owning buffer on it. The HostStore and the executors' staging use it.
#pragma once
#include <cstddef>
#include <functional>
#include <utility>

#include "engine/base/status.h"

namespace mt {

class HostAllocator {
 public:
  virtual ~HostAllocator() = default;
  virtual Result<void*> allocate(size_t bytes) = 0;  // aligned to at least 4 KiB
  virtual void release(void* p, size_t bytes) = 0;
  // allocate, with `place(p, bytes)` called on the memory before any page of it is touched (a
  // NUMA placement binds its ranges to nodes: numa.h); place's outcome goes to *placed (a failed
  // placement leaves a usable allocation). Default: allocate, whose fresh pages are untouched,
  // then place. A pinning allocator places before it pins (pinning faults every page in).
  using Place = std::function<Status(void* p, size_t bytes)>;
  virtual Result<void*> allocate_placed(size_t bytes, const Place& place, Status* placed);
  virtual bool pinned() const { return false; }
  // Before a large store is allocated (the HostStore: 80-1,500 GiB): whether `total_bytes` can
  // be had at all, refused with the reason, so a job fails at once instead of after minutes of
  // pinning. Default: no check (pageable memory can overcommit).
  virtual Status check_capacity(size_t total_bytes) const { return Status::Ok(); }
  // Whether allocate() may be called from several threads at once (pinning in parallel).
  virtual bool parallel_allocate() const { return false; }
};
HostAllocator& default_host_allocator();  // plain aligned pageable memory

// This machine's RAM, or the memory limit of the cgroup this process runs in when lower (a
// container's: cgroup v2 memory.max, v1 memory.limit_in_bytes); 0 when the system does not say.
// megatraind's --host_memory default is 80% of it, a local run's (megatrain train, plan) all of it.
uint64_t physical_memory_bytes();

// A buffer from a HostAllocator (pinned where the backend pins), released when destroyed.
class HostBuffer {
 public:
  HostBuffer() = default;
  static Result<HostBuffer> allocate(HostAllocator& alloc, size_t bytes);
  HostBuffer(HostBuffer&& o) noexcept { *this = std::move(o); }
  HostBuffer& operator=(HostBuffer&& o) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer();
  template <typename T>
  T* as() const { return static_cast<T*>(p_); }
  size_t bytes() const { return bytes_; }

 private:
  HostAllocator* alloc_ = nullptr;
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace mt

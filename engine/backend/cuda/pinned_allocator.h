// Pinned (page-locked, DMA-able) host memory for the HostStore: cudaHostAlloc per request (the
// HostStore already asks for large chunks). A refusal becomes a clear error naming the size,
// what is pinned already and the locked-memory limit.
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <mutex>
#include <set>
#include <cstddef>
#include <string>

#include "engine/base/host_memory.h"

namespace mt {

// RLIMIT_MEMLOCK soft limit in bytes; SIZE_MAX when unlimited.
size_t memlock_limit_bytes();

class PinnedAllocator final : public HostAllocator {
 public:
  // `device`: made current on the calling thread before each call (the HostStore may pin from
  // any thread; without it a thread on no device would create device 0's context).
  explicit PinnedAllocator(int device = 0) : device_(device) {}
  Result<void*> allocate(size_t bytes) override;
  // Placed memory is mapped (2 MiB aligned, huge pages asked for), placed, then pinned in place
  // with cudaHostRegister, which faults the pages in where the placement binds them. If the
  // driver refuses that, the memory is cudaHostAlloc'd as usual and *placed says so.
  Result<void*> allocate_placed(size_t bytes, const Place& place, Status* placed) override;
  void release(void* p, size_t bytes) override;
  bool pinned() const override { return true; }
  // Pinned pages cannot be swapped: the total must fit in the memory the kernel reports as
  // available (MemAvailable), or cudaHostAlloc fails part way (or the OOM killer acts).
  Status check_capacity(size_t total_bytes) const override;
  bool parallel_allocate() const override { return true; }  // cudaHostAlloc is thread-safe
  size_t pinned_bytes() const { return pinned_.load(); }

 private:
  Status refused(size_t rounded, const char* call, cudaError_t e) const;

  int device_;
  std::atomic<size_t> pinned_{0};
  std::mutex mu_;
  std::set<void*> registered_;  // from allocate_placed: unregistered and unmapped on release
};

}  // namespace mt

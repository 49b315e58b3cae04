#include "engine/backend/cuda/pinned_allocator.h"

#include <cuda_runtime.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "engine/backend/cuda/cuda_errors.h"

namespace mt {

size_t memlock_limit_bytes() {
  rlimit r{};
  if (getrlimit(RLIMIT_MEMLOCK, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return SIZE_MAX;
  return size_t(r.rlim_cur);
}

namespace {
constexpr size_t kHugePage = size_t(2) << 20;

size_t rounded_size(size_t bytes) {
  const size_t r = (bytes + 4095) / 4096 * 4096;
  return r ? r : 4096;
}

// What allocate_placed maps for `bytes`: whole huge pages.
size_t placed_size(size_t bytes) { return (rounded_size(bytes) + kHugePage - 1) / kHugePage * kHugePage; }

std::string limit_text() {
  const size_t l = memlock_limit_bytes();
  return l == SIZE_MAX ? std::string("unlimited") : std::to_string(l) + " bytes";
}
}  // namespace

namespace {
// /proc/meminfo's MemAvailable in bytes; 0 when unknown.
size_t mem_available_bytes() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kib = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) break;
  std::fclose(f);
  return size_t(kib) * 1024;
}
std::string gib(size_t b) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f GiB", double(b) / double(size_t(1) << 30));
  return s;
}
}  // namespace

// RLIMIT_MEMLOCK is not checked here: cudaHostAlloc pins through the NVIDIA driver, which does
// not charge the locked-memory rlimit the way mlock() does (docs/ARCHITECTURE.md, "Pinned
// memory at scale"). The limit is still named in the refusal below, for the case where a
// driver does enforce it; the unit file sets LimitMEMLOCK=infinity either way.
Status PinnedAllocator::check_capacity(size_t total_bytes) const {
  const size_t avail = mem_available_bytes();
  if (avail == 0 || total_bytes <= avail) return Status::Ok();
  return resource_exhausted("pinning " + gib(total_bytes) + " of host memory for the optimizer state needs that much " +
                            "physical memory (pinned pages cannot be swapped), but only " + gib(avail) +
                            " is available (MemAvailable); locked-memory limit (ulimit -l): " + limit_text() +
                            ". Free host memory, use memory.layout = compact, or a smaller model");
}

Status PinnedAllocator::refused(size_t rounded, const char* call, cudaError_t e) const {
  return resource_exhausted("pinning " + std::to_string(rounded) + " bytes of host memory was refused (" + call + ": " +
                            cudaGetErrorString(e) + "); already pinned: " + std::to_string(pinned_.load()) +
                            " bytes; locked-memory limit (ulimit -l): " + limit_text() +
                            ". Raise the limit (systemd: LimitMEMLOCK=infinity), free host memory, or use "
                            "memory.layout = compact");
}

Result<void*> PinnedAllocator::allocate(size_t bytes) {
  const size_t rounded = rounded_size(bytes);
  void* p = nullptr;
  if (!bind_device(device_, nullptr))
    return failed_precondition("pinning host memory: cannot make CUDA device " + std::to_string(device_) + " current");
  const cudaError_t e = cudaHostAlloc(&p, rounded, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear it: the device itself is fine
    return refused(rounded, "cudaHostAlloc", e);
  }
  pinned_ += rounded;
  return p;
}

Result<void*> PinnedAllocator::allocate_placed(size_t bytes, const Place& place, Status* placed) {
  const size_t rounded = placed_size(bytes);
  if (!bind_device(device_, nullptr))
    return failed_precondition("pinning host memory: cannot make CUDA device " + std::to_string(device_) + " current");
  // Over-map by a huge page to start on a 2 MiB boundary; the slack is unmapped at once.
  char* raw = static_cast<char*>(::mmap(nullptr, rounded + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (raw == MAP_FAILED) return resource_exhausted("mapping " + std::to_string(rounded) + " bytes of host memory failed");
  char* p = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(raw) + kHugePage - 1) / kHugePage * kHugePage);
  if (p > raw) ::munmap(raw, size_t(p - raw));
  if (p + rounded < raw + rounded + kHugePage) ::munmap(p + rounded, size_t(raw + rounded + kHugePage - (p + rounded)));
  (void)::madvise(p, rounded, MADV_HUGEPAGE);
  *placed = place(p, rounded);
  const cudaError_t e = cudaHostRegister(p, rounded, cudaHostRegisterPortable);
  if (e != cudaSuccess) {  // pinned the usual way instead, unplaced (the placement is a speed-up only)
    cudaGetLastError();
    ::munmap(p, rounded);
    *placed = internal_error(std::string("cudaHostRegister refused placed memory (") + cudaGetErrorString(e) +
                             "); pinned with cudaHostAlloc, unplaced");
    return allocate(bytes);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    registered_.insert(p);
  }
  pinned_ += rounded;
  return static_cast<void*>(p);
}

void PinnedAllocator::release(void* p, size_t bytes) {
  if (!p) return;
  bind_device(device_, nullptr);
  bool mapped = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    mapped = registered_.erase(p) > 0;
  }
  if (mapped) {
    const size_t rounded = placed_size(bytes);
    cudaHostUnregister(p);
    ::munmap(p, rounded);
    pinned_ -= rounded;
    return;
  }
  cudaFreeHost(p);
  pinned_ -= rounded_size(bytes);
}

}  // namespace mt

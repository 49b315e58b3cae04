#include "engine/backend/cuda/pinned_allocator.h"

#include <cuda_runtime.h>
#include <sys/resource.h>

#include <cstdint>

#include "engine/backend/cuda/cuda_errors.h"

namespace mt {

size_t memlock_limit_bytes() {
  rlimit r{};
  if (getrlimit(RLIMIT_MEMLOCK, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return SIZE_MAX;
  return size_t(r.rlim_cur);
}

namespace {
size_t rounded_size(size_t bytes) {
  const size_t r = (bytes + 4095) / 4096 * 4096;
  return r ? r : 4096;
}

std::string limit_text() {
  const size_t l = memlock_limit_bytes();
  return l == SIZE_MAX ? std::string("unlimited") : std::to_string(l) + " bytes";
}
}  // namespace

Result<void*> PinnedAllocator::allocate(size_t bytes) {
  const size_t rounded = rounded_size(bytes);
  void* p = nullptr;
  if (!bind_device(device_, nullptr))
    return failed_precondition("pinning host memory: cannot make CUDA device " + std::to_string(device_) + " current");
  const cudaError_t e = cudaHostAlloc(&p, rounded, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear it: the device itself is fine
    return resource_exhausted("pinning " + std::to_string(rounded) + " bytes of host memory was refused (cudaHostAlloc: " +
                              cudaGetErrorString(e) + "); already pinned: " + std::to_string(pinned_.load()) +
                              " bytes; locked-memory limit (ulimit -l): " + limit_text() +
                              ". Raise the limit (systemd: LimitMEMLOCK=infinity), free host memory, or use "
                              "memory.layout = compact");
  }
  pinned_ += rounded;
  return p;
}

void PinnedAllocator::release(void* p, size_t bytes) {
  if (!p) return;
  bind_device(device_, nullptr);
  cudaFreeHost(p);
  pinned_ -= rounded_size(bytes);
}

}  // namespace mt

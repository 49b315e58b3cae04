// The CudaBackend's sticky error: the first failed CUDA/cuBLAS call of any void Backend or Ops
// method, kept for Backend::error(). Thread-safe (the uploader, optimizer and compute threads
// all call the backend). A sticky CUDA error (cuda::is_sticky: the context is unusable) makes
// the status StatusCode::kDeviceLost — still naming the first failing call — so the job stops
// and megatraind exits for a restart in a fresh process.
#pragma once
#include <cuda_runtime.h>

#include <mutex>
#include <string>

#include "engine/base/status.h"
#include "kernels/cuda/status.cuh"

namespace mt {

class CudaErrors {
 public:
  // Records `s` (when failed) and returns whether it was ok.
  bool note(const cuda::CudaStatus& s, const char* where) {
    if (s.ok()) return true;
    const bool lost = cuda::is_sticky(s);
    std::lock_guard<std::mutex> l(mu_);
    if (first_.ok()) {
      const std::string m = std::string(where) + ": " + cuda::describe(s);
      first_ = lost ? device_lost(m + " (the device context is unusable; restart the process)") : internal_error(m);
    } else if (lost && first_.code() != StatusCode::kDeviceLost) {
      // The first failure stays named first; the code says the context is now gone as well.
      first_ = device_lost(first_.message() + "; then the device context was lost: " + where + ": " +
                           cuda::describe(s));
    }
    return false;
  }
  bool note(cudaError_t e, const char* call) { return note(cuda::check_cuda(e, call), call); }
  // A failure of work another component enqueued (Backend::set_error); it never loses the
  // device context, so the code stays `why`'s.
  void note(const Status& why) {
    std::lock_guard<std::mutex> l(mu_);
    if (first_.ok()) first_ = why;
  }
  Status get() const {
    std::lock_guard<std::mutex> l(mu_);
    return first_;
  }

 private:
  mutable std::mutex mu_;
  Status first_;
};

// Makes `device` current on the calling thread. The runtime's current device is per host
// thread, and every Backend/Ops/allocator entry point may run on another thread (uploader,
// optimizer, compute, the HostStore's pinning): each calls this first, for device 0 as well (a
// thread that never chose one is on device 0 only by default, and a second backend in the
// process may have moved it). cudaGetDevice is a cheap thread-local read, so the common case
// costs no cudaSetDevice.
inline bool bind_device(int device, CudaErrors* errors) {
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur == device) return true;
  const cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess) return true;
  if (errors) return errors->note(e, "cudaSetDevice");
  cuda::clear_last_error();
  return false;
}

}  // namespace mt

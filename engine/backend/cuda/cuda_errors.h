// The CudaBackend's sticky error: the first failed CUDA/cuBLAS call of any void Backend or Ops
// method, kept for Backend::error(). Thread-safe (the uploader, optimizer and compute threads
// all call the backend).
#pragma once
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
    std::lock_guard<std::mutex> l(mu_);
    if (first_.ok()) first_ = internal_error(std::string(where) + ": " + cuda::describe(s));
    return false;
  }
  bool note(cudaError_t e, const char* call) { return note(cuda::check_cuda(e, call), call); }
  Status get() const {
    std::lock_guard<std::mutex> l(mu_);
    return first_;
  }

 private:
  mutable std::mutex mu_;
  Status first_;
};

}  // namespace mt

// CudaBackend: the Backend interface on one CUDA device — a cudaMalloc'd arena, pinned host
// memory, three non-blocking streams (H2D, compute, D2H) ordered by events, and the CUDA op
// table (kernels/cuda) on the compute stream. Declared in every build: without CUDA the
// factory returns Unimplemented and cuda_available() is false, so callers need no #ifdef.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/backend/backend.h"

namespace mt {

struct CudaBackendOptions {
  int device = 0;
  size_t gemm_workspace_bytes = size_t(32) << 20;  // cuBLASLt workspace
  size_t bf16_staging_elems = size_t(16) << 20;    // device staging of copy_d2h_bf16, per chunk
};

// True when this engine was built with CUDA and at least one device is usable.
bool cuda_available();
// A one-line description of why CUDA is (not) available: "CUDA: 1 device(s), NVIDIA H200 ...".
std::string cuda_describe();
// Device 0's memory in bytes (what the planner may budget against), 0 when there is none.
uint64_t cuda_device_memory();

Result<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& opt);

}  // namespace mt

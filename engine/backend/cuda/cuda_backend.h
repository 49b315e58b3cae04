// CudaBackend: the Backend interface on one CUDA device — a cudaMalloc'd arena, pinned host
// memory, three non-blocking streams (H2D, compute, D2H) ordered by events, and the CUDA op
// table (kernels/cuda) on the compute stream. Declared in every build: without CUDA the
// factory returns Unimplemented and cuda_available() is false, so callers need no #ifdef.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/backend/backend.h"
#include "kernels/attention.h"
#include "kernels/rmsnorm.h"

namespace mt {

struct CudaBackendOptions {
  int device = 0;
  size_t gemm_workspace_bytes = size_t(32) << 20;  // cuBLASLt workspace
  size_t bf16_staging_elems = size_t(16) << 20;    // device staging of copy_d2h_bf16, per chunk
  // cuDNN attention's workspace (cuda_attention_workspace_bytes); 0 = none reserved, so cuDNN
  // takes only the calls whose graphs need no workspace and the others fall back.
  size_t attention_workspace_bytes = 0;
};

// The cuDNN attention workspace a micro-batch of `rows` sequences of `seq_len` tokens reserves
// when the process's attention kernel is cuDNN (MEGATRAIN_ATTENTION=cudnn,
// kernels/cuda/attention.cuh) and this build has it; 0 otherwise. The planner counts it
// (cuda_fixed_device_bytes).
uint64_t cuda_attention_workspace_bytes(int rows, int seq_len, int heads, int kv_heads, int head_dim);
// Non-empty when MEGATRAIN_ATTENTION asks for cuDNN and this build cannot give it: the warning a
// job logs before falling back to our own kernels.
std::string cuda_attention_warning();
// The attention kernel bf16 runs on ("cudnn", "mma", "simt"; "none" without CUDA) and the cuDNN
// library this build runs with ("cuDNN 9.19.0 (built against 9.19.0, frontend 1.32.0)"), for
// job logs and every bench JSON.
std::string cuda_attention_kernel_name();
std::string cuda_cudnn_describe();
// cuDNN attention calls (forward and backward) this process has made: 0 means every attention
// ran on our kernels, whatever MEGATRAIN_ATTENTION asked (a refused shape falls back).
uint64_t cuda_cudnn_attention_calls();
// cuDNN graph pairs built so far and the host seconds they took (0 without cuDNN).
struct CudnnBuildTotals {
  uint64_t graphs = 0;
  double seconds = 0;
};
CudnnBuildTotals cuda_cudnn_graph_builds();

// True when this engine was built with CUDA and at least one device is usable.
bool cuda_available();
// A one-line description of why CUDA is (not) available: "CUDA: 1 device(s), NVIDIA H200 ...".
std::string cuda_describe();
// Device 0's memory in bytes, 0 when there is none.
uint64_t cuda_device_memory();
// Device 0's free memory now (cudaMemGetInfo, so after this process's CUDA context), 0 when
// there is none: the device budget a job gets unless it is given one.
uint64_t cuda_free_device_memory();

// Device memory the CUDA backend allocates outside its arena, which the planner counts: the
// cuBLASLt workspace, the bf16 staging of copy_d2h_bf16, cuDNN attention's workspace, and the op scratch the op tables grow
// on demand (one CudaOpContext, shared by the fp32 and bf16 tables) for a micro-batch of
// `tokens` rows of width `hidden` — the widest norm — (RMSNorm's and the q/k norms' dweight partials, at most kRmsnormMaxParts x hidden
// floats in either precision; the head's per-token loss rows, tokens + 2 doubles), with the
// 1.5x headroom it grows by.
// `other_scratch`: the largest scratch another op asks of it (cuda_moe_scratch_bytes).
inline uint64_t cuda_fixed_device_bytes(const CudaBackendOptions& opt, uint64_t tokens, uint64_t hidden,
                                        uint64_t other_scratch = 0) {
  const uint64_t rms = uint64_t(cpu::kRmsnormMaxParts) * hidden * sizeof(float), loss = (tokens + 2) * sizeof(double);
  const uint64_t scratch = std::max({rms, loss, other_scratch});
  return opt.gemm_workspace_bytes + opt.bf16_staging_elems * sizeof(bf16) + opt.attention_workspace_bytes + scratch +
         scratch / 2;
}

// The op scratch a mixture of experts' ops (and attention sinks) grow the op context to, for a
// micro-batch of `tokens` (kernels/cuda/moe.cu, attention_sinks.cu): the expert sort's slot keys
// and values and CUB's radix-sort storage (within 32 bytes a slot and 1 MiB), the router
// statistics' partials (at most 512 x 2E floats), the sinks' gradient partials (256 x H floats).
inline uint64_t cuda_moe_scratch_bytes(uint64_t tokens, int experts, int top_k, int heads) {
  const uint64_t sort = 32 * tokens * uint64_t(top_k) + (uint64_t(1) << 20);
  const uint64_t route = 512 * 2 * uint64_t(experts) * sizeof(float), sinks = 256 * uint64_t(heads) * sizeof(float);
  return std::max({sort, route, sinks});
}

// The CUDA attention kernels hold a head in shared memory: head_dim at most
// cpu::kCudaAttentionMaxHeadDim. The planner refuses such a model for a CUDA job at submit.
inline Status cuda_supports_head_dim(int head_dim) {
  if (head_dim >= 1 && head_dim <= cpu::kCudaAttentionMaxHeadDim) return Status::Ok();
  return invalid_argument("head_dim = " + std::to_string(head_dim) + " is beyond the CUDA attention kernels' limit of " +
                          std::to_string(cpu::kCudaAttentionMaxHeadDim) + " (use backend: cpu, or a model with smaller heads)");
}

Result<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& opt);

}  // namespace mt

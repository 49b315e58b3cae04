// CUDA causal GQA attention (kernels/attention.h contract), flash style: keys in tiles of 32
// with an online softmax, O(T*D) memory, no T x T matrix. head_dim D <= 256, any value.
// T = float or __nv_bfloat16 storage; math and lse in fp32.
//  * forward: one warp per query row, a block of rows shares each K/V tile in shared memory.
//  * backward (recomputes P from lse; deterministic, no atomics): dK/dV by the block that owns
//    a (sequence, kv head, key tile) — summing over its query heads and rows in a fixed order —
//    and dQ in a separate pass, one warp per query row.
// This is the portable fp32-FMA ("simt") version, used for fp32 storage and any head_dim. For
// bf16 storage with head_dim 64 or 128 a tensor-core flash attention (WMMA bf16, fp32 accumulate;
// attention_mma_*.cu) is used instead, unless attention_kernel() says kSimt.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention.h"
#include "kernels/cuda/status.cuh"

namespace mt::cuda {

// pos [B*T]: positions within documents (kernels/attention.h), or nullptr for one per row;
// opt: the sliding window and score scale.
template <typename T>
CudaStatus attention_forward(T* out, float* lse, const T* qkv, const int32_t* pos, int B, int T_, int H, int KVH,
                             int D, cudaStream_t stream, AttentionOptions opt = {});

// dqkv (same layout as qkv) is overwritten.
template <typename T>
CudaStatus attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse, const int32_t* pos,
                              int B, int T_, int H, int KVH, int D, cudaStream_t stream, AttentionOptions opt = {});

// Which kernel bf16 attention uses. The default is read once, at the first call, from the
// environment: MEGATRAIN_ATTENTION=cudnn selects kCudnn (cuDNN's fused SDPA, through
// CudnnAttention in the CUDA backend's op table, attention_cudnn.cuh), =mma kTensorCore (ours,
// head_dim 64 / 128), anything else kSimt — the default until a GPU run has verified the others
// (docs/PERF.md). set_attention_kernel overrides it for the process (benches and tests compare).
// These two functions run our own kernels: kCudnn means kSimt here (the op table calls cuDNN
// before them, and falls back to them when cuDNN refuses a call).
enum class AttentionKernel { kTensorCore, kSimt, kCudnn };
AttentionKernel attention_kernel();
void set_attention_kernel(AttentionKernel kernel);
// "cudnn", "mma", "simt"; parse_attention_kernel is false for any other name.
const char* attention_kernel_name(AttentionKernel kernel);
bool parse_attention_kernel(const char* name, AttentionKernel* kernel);

}  // namespace mt::cuda

// CUDA attention sinks (gpt-oss; kernels/attention.h contract): a learned logit per query head
// folded into attention_forward's out and lse after the fact, and its gradient. T = float or
// __nv_bfloat16 storage of out; lse, the sinks' gradient and all math fp32.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/cuda/status.cuh"

namespace mt::cuda {

// In place on out [B*T, H*D] and lse [B, H, T]: lse' = log(exp(lse) + exp(sink[h])), out' = out *
// exp(lse - lse') — a warp per (b, h, t), each out element rounded to T once.
template <typename T>
CudaStatus attention_sinks_forward(T* out, float* lse, const T* sinks, int B, int T_, int H, int D,
                                   cudaStream_t stream);

// Floats of scratch attention_sinks_backward needs (per head, fixed row-block partials).
size_t attention_sinks_backward_scratch(int B, int T_, int H);

// dsinks [H] += -sum over (b, t) of exp(sink[h] - lse') (dout . out'), deterministic without
// atomics: a warp per row's dot product, summed per fixed block of rows (each warp's rows in
// order, then the warps in order) into partials, and the partials in block order. scratch holds
// attention_sinks_backward_scratch(B, T_, H) floats.
template <typename T>
CudaStatus attention_sinks_backward(float* dsinks, const T* dout, const T* out, const float* lse, const T* sinks, int B,
                                    int T_, int H, int D, float* scratch, cudaStream_t stream);

}  // namespace mt::cuda

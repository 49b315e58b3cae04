// CUDA RoPE (kernels/rope.h contract), in place on the q and k parts of fused qkv rows.
// Angles pos * inv_freq are formed and their sin/cos taken in double, as on the CPU.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/status.cuh"

namespace mt::cuda {

template <typename T>
CudaStatus rope_forward(T* qkv, const float* inv_freq, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                        float scale, cudaStream_t stream);
template <typename T>
CudaStatus rope_backward(T* dqkv, const float* inv_freq, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                         float scale, cudaStream_t stream);

}  // namespace mt::cuda

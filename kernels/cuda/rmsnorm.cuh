// CUDA RMSNorm (kernels/rmsnorm.h contract). T = float or __nv_bfloat16 storage; statistics
// (rstd) are always fp32 and math is fp32 with per-row sums in double.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/cuda/status.cuh"

namespace mt::cuda {

// offset: the scale is weight + offset (kernels/rmsnorm.h).
template <typename T>
CudaStatus rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, int N, int C, float eps,
                           cudaStream_t stream, float offset = 0);

// Floats of scratch rmsnorm_backward needs for the deterministic dweight reduction.
size_t rmsnorm_backward_scratch(int N, int C);

// Accumulating: dinp += dL/dinp (read, summed in fp32, rounded to T once), dweight +=
// dL/dweight. dweight is reduced without atomics: per-row-block partials (a fixed partition of
// the rows) summed in block order, so results are bit-reproducible on any GPU. scratch holds
// rmsnorm_backward_scratch(N, C) floats. G (the gradient type) is float: instantiated for
// (float, float) and (bf16, float).
template <typename T, typename G>
CudaStatus rmsnorm_backward(T* dinp, G* dweight, const T* dout, const T* inp, const T* weight, const float* rstd,
                            int N, int C, float* scratch, cudaStream_t stream, float offset = 0);

}  // namespace mt::cuda

// CUDA Q/K normalisation (kernels/qk_norm.h contract). T = float or __nv_bfloat16 storage, rstd
// fp32, math fp32 with per-vector sums in double (as rmsnorm.cu).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/cuda/status.cuh"
#include "kernels/qk_norm.h"

namespace mt::cuda {

template <typename T>
CudaStatus qk_norm_forward(T* qkv, float* rstd, const T* raw, const T* wq, const T* wk, const QkNormShape& s, float eps,
                           float offset, cudaStream_t stream);

// Floats of scratch qk_norm_backward needs (the weight gradients' fixed row-block partials).
size_t qk_norm_backward_scratch(const QkNormShape& s);

// As cpu::qk_norm_backward; dwq and dwk (fp32) reduced without atomics, in a fixed order.
template <typename T>
CudaStatus qk_norm_backward(T* draw, float* dwq, float* dwk, const T* dqkv, const T* raw, const T* wq, const T* wk,
                            const float* rstd, const QkNormShape& s, float offset, float* scratch, cudaStream_t stream);

}  // namespace mt::cuda

// CUDA fused AdamW (kernels/adamw.h contract): one pass over param, grad, m, v and an optional
// bf16 shadow. S (grad/m/v storage) = float ("exact") or __nv_bfloat16 ("compact"); fp32 math.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/adamw.h"
#include "kernels/cuda/status.cuh"

namespace mt::cuda {

template <typename S>
CudaStatus adamw_update(float* param, const S* grad, S* m, S* v, __nv_bfloat16* shadow, size_t n,
                        const cpu::AdamWParams& p, cudaStream_t stream);

}  // namespace mt::cuda

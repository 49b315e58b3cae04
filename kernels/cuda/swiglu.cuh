// CUDA gated activations (kernels/swiglu.h contract): out = act(gate) * up, gu rows [gate | up].
#pragma once
#include <cuda_runtime.h>

#include "kernels/cuda/status.cuh"
#include "kernels/swiglu.h"

namespace mt::cuda {

template <typename T>
CudaStatus swiglu_forward(T* out, const T* gu, int N, int F, cudaStream_t stream,
                          Activation act = {});
// dgu is overwritten.
template <typename T>
CudaStatus swiglu_backward(T* dgu, const T* dout, const T* gu, int N, int F, cudaStream_t stream,
                           Activation act = {});

}  // namespace mt::cuda

// CUDA token embedding (kernels/embedding.h contract).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/status.cuh"

namespace mt::cuda {

template <typename T>
CudaStatus embedding_forward(T* out, const int32_t* tokens, const T* wte, int N, int C, cudaStream_t stream);

// dwte[tokens[i]] += dout[i], deterministic without sorting or atomics: each thread block owns
// the rows of one token bucket (token % kBuckets) over one channel range and scans the tokens
// in order, so every element receives its contributions in token order — the same sums, in
// the same order, as the CPU reference. G (the gradient type) is float: instantiated for
// (float, float) and (bf16, float). The forward copies rows exactly, in any T.
template <typename T, typename G>
CudaStatus embedding_backward(G* dwte, const T* dout, const int32_t* tokens, int N, int C, cudaStream_t stream);

}  // namespace mt::cuda

// CUDA fused LM head + cross-entropy (kernels/lm_head_loss.h contract), chunked over tokens:
// per chunk a cuBLASLt GEMM for the logits, a softmax/CE kernel (one block per row, fp32 math,
// loss in double), then GEMMs for dx and dW. The [N, V] logits never exist.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/status.cuh"

namespace mt::cuda {

// As mt::cpu::lm_head_loss, except that the sums stay on the device: row_loss ([N] doubles,
// device) receives each token's loss (0 for ignored targets) and totals ([2] doubles, device)
// receives {sum of losses in token order, number of counted targets}. Nothing synchronises.
template <typename T>
CudaStatus lm_head_loss(T* dx, T* dW, T* losses, const T* x, const T* W, const int32_t* targets, int N, int C, int V,
                        int chunk, float grad_scale, T* scratch, double* row_loss, double* totals,
                        GemmContext& ctx, cudaStream_t stream);

}  // namespace mt::cuda

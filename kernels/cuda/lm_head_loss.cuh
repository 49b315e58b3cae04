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
// Logits, softmax, the losses and dW are fp32 in every T. scratch: chunk * V floats (a chunk's
// logits, from a GEMM with T inputs and fp32 output); for T = __nv_bfloat16 followed by
// chunk * V bf16, the chunk's d(logits) * grad_scale rounded once to bf16, which the dx GEMM
// (bf16 output, rounded once) and the dW GEMM (fp32 C, beta = 1) read — the rounding points of
// mt::cpu::lm_head_loss for bf16. For T = float d(logits) overwrite the logits in place.
// softcap: as mt::cpu::lm_head_loss's (0 = none).
template <typename T>
CudaStatus lm_head_loss(T* dx, float* dW, float* losses, const T* x, const T* W, const int32_t* targets, int N, int C,
                        int V, int chunk, float grad_scale, void* scratch, double* row_loss, double* totals,
                        GemmContext& ctx, cudaStream_t stream, float softcap = 0);

}  // namespace mt::cuda

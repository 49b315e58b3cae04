// Fused LM head + softmax cross-entropy, chunked over tokens: the [N, V] logits never exist,
// only [chunk, V] at a time, and each chunk's backward is done right after its forward.
//   logits = x @ W^T (x [N, C], W [V, C]); loss_i = logsumexp(logits_i) - logits_i[target_i].
// Targets < 0 are ignored (no loss, no gradient). With softcap > 0 (Gemma 2's final logit
// soft-capping) the logits are softcap * tanh(logits / softcap) before the softmax.
#pragma once
#include <cstdint>

#include "kernels/bf16.h"

namespace mt::cpu {

struct LmHeadLossResult {
  double loss_sum = 0;  // sum of per-token losses over counted targets
  long counted = 0;     // number of targets >= 0
};

// scratch must hold chunk * V elements. When dx is non-null, the backward of
// (grad_scale * sum of losses) is computed: dx is overwritten ([N, C]), dW accumulated (+=).
// losses (optional, [N]) receives each token's loss (0 for ignored targets).
template <typename T>
LmHeadLossResult lm_head_loss(T* dx, T* dW, T* losses, const T* x, const T* W,
                              const int32_t* targets, int N, int C, int V, int chunk,
                              T grad_scale, T* scratch, float softcap = 0);

// Mixed precision: x and W in bf16. Logits, softmax, losses and d(logits) in fp32; d(logits)
// (times grad_scale) is rounded to bf16 before the dx and dW GEMMs (bf16 inputs, fp32 sums, as
// the CUDA kernel's cuBLASLt GEMMs take them); dx is rounded to bf16 once, dW accumulates in
// fp32. scratch: chunk * V floats, then chunk * V bf16.
LmHeadLossResult lm_head_loss(bf16* dx, float* dW, float* losses, const bf16* x, const bf16* W,
                              const int32_t* targets, int N, int C, int V, int chunk, float grad_scale,
                              void* scratch, float softcap = 0);

}  // namespace mt::cpu

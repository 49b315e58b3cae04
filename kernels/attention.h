// Causal grouped-query attention, flash-attention style: tiled over keys with an online
// softmax, memory O(T*D) per head — no T x T matrix is ever formed.
// qkv rows [q (H*D) | k (KVH*D) | v (KVH*D)] (post-rope), B*T rows. Query head h uses kv head
// h / (H / KVH). Scale 1/sqrt(D).
// out [B*T, H*D]; lse [B, H, T] = log-sum-exp of the scaled scores per query (for backward).
// Packed documents: pos [B*T] (or nullptr = one document per row) is each token's position in
// its document (0 at a document's first token, +1 per token after it), the same array RoPE
// rotates by. Query t sees keys t - pos[t] .. t: causal and masked to its own document.
#pragma once
#include <cstdint>

namespace mt::cpu {

// The CUDA kernels (kernels/cuda/attention_*.cu) keep a head in shared memory: D at most this.
constexpr int kCudaAttentionMaxHeadDim = 256;

template <typename T>
void attention_forward(T* out, T* lse, const T* qkv, const int32_t* pos, int B, int T_, int H, int KVH,
                       int D);

// dqkv (same layout as qkv) is overwritten with the gradient w.r.t. q, k and v.
// Recomputes the probabilities from qkv and lse; never stores them.
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse,
                        const int32_t* pos, int B, int T_, int H, int KVH, int D);

}  // namespace mt::cpu

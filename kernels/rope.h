// Rotary position embedding, HF "rotate half" convention, applied in place to the q and k
// parts of a fused qkv buffer. qkv rows are [q (H*D) | k (KVH*D) | v (KVH*D)], one row per
// token, B sequences of T tokens. Position of a token = pos[b*T + t] (its position in its
// document, see attention.h), or its index in its sequence when pos is nullptr.
// inv_freq [D/2] holds the (possibly scaled) inverse frequencies: angle = pos * inv_freq[i];
// pair (x[i], x[i + D/2]) is rotated by that angle and multiplied by `scale` (cos and sin are
// scaled, as transformers scales them by YaRN's attention factor; 1 for every other RoPE).
#pragma once
#include <cstdint>

namespace mt::cpu {

template <typename T>
void rope_forward(T* qkv, const float* inv_freq, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                  float scale);

// Gradient of rope: rotates the q and k parts of dqkv back by the same angles (and multiplies
// by the same scale), in place.
template <typename T>
void rope_backward(T* dqkv, const float* inv_freq, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                   float scale);

}  // namespace mt::cpu

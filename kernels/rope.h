// Rotary position embedding, HF "rotate half" convention, applied in place to the q and k
// parts of a fused qkv buffer. qkv rows are [q (H*D) | k (KVH*D) | v (KVH*D)], one row per
// token, B sequences of T tokens; position of a token = its index in its sequence.
// inv_freq [D/2] holds the (possibly scaled) inverse frequencies: angle = pos * inv_freq[i];
// pair (x[i], x[i + D/2]) is rotated by that angle.
#pragma once

namespace mt::cpu {

template <typename T>
void rope_forward(T* qkv, const float* inv_freq, int B, int T_, int H, int KVH, int D);

// Gradient of rope: rotates the q and k parts of dqkv back by the same angles, in place.
template <typename T>
void rope_backward(T* dqkv, const float* inv_freq, int B, int T_, int H, int KVH, int D);

}  // namespace mt::cpu

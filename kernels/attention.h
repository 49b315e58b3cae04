// Causal grouped-query attention, flash-attention style: tiled over keys with an online
// softmax, memory O(T*D) per head — no T x T matrix is ever formed.
// qkv rows [q (H*D) | k (KVH*D) | v (KVH*D)] (post-rope), B*T rows. Query head h uses kv head
// h / (H / KVH). Scale 1/sqrt(D).
// out [B*T, H*D]; lse [B, H, T] = log-sum-exp of the scaled scores per query (for backward).
// Packed documents: pos [B*T] (or nullptr = one document per row) is each token's position in
// its document (0 at a document's first token, +1 per token after it), the same array RoPE
// rotates by. Query t sees keys t - pos[t] .. t: causal and masked to its own document.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

namespace mt {

// What a family changes in attention (engine/model/model_config.h: LayerAttention): a sliding
// window of `window` keys — query t sees keys t - window + 1 .. t, within its document as
// always (0 = no window: all of them) —, the score scale (0 = 1/sqrt(head_dim); Gemma's
// query_pre_attn_scalar^-1/2 otherwise) and Gemma 2's soft cap of the scaled scores,
// s -> softcap * tanh(s / softcap) (0 = none).
struct AttentionOptions {
  int window = 0;
  double scale = 0;
  double softcap = 0;
  bool operator==(const AttentionOptions&) const = default;
};

// The same documents as spans, for kernels that take ragged sequences (cuDNN): starts[i] is the
// first token (b*T + t) of document i in token order, starts[count] = B*T; a document never
// crosses a row. `starts` is on the host, `device_starts` the same count + 1 values on the
// device (the executor uploads them with the batch).
struct DocumentSpans {
  const int32_t* starts = nullptr;
  const int32_t* device_starts = nullptr;
  int count = 0;
};

// The spans the positions imply: a document starts at every row's first token and wherever a
// token's first visible key (t - pos[t], clipped to its row) differs from its predecessor's.
// Empty when pos is nullptr (one document per row needs no spans), or when some token's first
// visible key is not its document's first token (positions that are not runs of 0, 1, 2, ...):
// then no ragged batch is the same attention, and kernels that need spans refuse the call.
std::vector<int32_t> document_starts(const int32_t* pos, int B, int T);

}  // namespace mt

namespace mt::cpu {

// The CUDA kernels (kernels/cuda/attention_*.cu) keep a head in shared memory: D at most this.
constexpr int kCudaAttentionMaxHeadDim = 256;

template <typename T>
void attention_forward(T* out, T* lse, const T* qkv, const int32_t* pos, int B, int T_, int H, int KVH,
                       int D, AttentionOptions opt = {});

// dqkv (same layout as qkv) is overwritten with the gradient w.r.t. q, k and v.
// Recomputes the probabilities from qkv and lse; never stores them.
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse,
                        const int32_t* pos, int B, int T_, int H, int KVH, int D, AttentionOptions opt = {});

// Attention sinks (gpt-oss): one learned logit per query head joins every softmax as an extra
// key with no value, so lse' = log(exp(lse) + exp(sink[h])) and out' = out * exp(lse - lse').
// In place on attention_forward's out [B*T, H*D] and lse [B, H, T]; attention_backward given
// out' and lse' is then exactly the sinks' attention backward for q, k and v.
template <typename T>
void attention_sinks_forward(T* out, T* lse, const T* sinks, int B, int T_, int H, int D);
// dsinks [H] += d(loss)/d(sink[h]) = -sum over queries of exp(sink[h] - lse') (dout . out').
template <typename T>
void attention_sinks_backward(T* dsinks, const T* dout, const T* out, const T* lse, const T* sinks, int B, int T_,
                              int H, int D);

}  // namespace mt::cpu

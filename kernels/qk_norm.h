// Q/K normalisation before RoPE: RMSNorm of the query and key projections, per head over
// head_dim (Qwen3, Gemma 3) or over each whole projection (OLMo 2). raw and qkv rows are
// attention's [q (H*D) | k (KVH*D) | v (KVH*D)]. A row's q holds `per_head ? H : 1` vectors of
// `per_head ? D : H*D` (wq that long), its k likewise with KVH (wk); rstd [N, q vectors + k
// vectors] in that order. The scale is w + offset (kernels/rmsnorm.h).
#pragma once

// The CUDA kernels read the shape on the device too.
#ifdef __CUDACC__
#define MT_HOST_DEVICE __host__ __device__
#else
#define MT_HOST_DEVICE
#endif

namespace mt {
struct QkNormShape {
  int N, H, KVH, D;
  bool per_head;
  MT_HOST_DEVICE int q_vectors() const { return per_head ? H : 1; }
  MT_HOST_DEVICE int k_vectors() const { return per_head ? KVH : 1; }
  MT_HOST_DEVICE int q_width() const { return per_head ? D : H * D; }
  MT_HOST_DEVICE int k_width() const { return per_head ? D : KVH * D; }
  MT_HOST_DEVICE int vectors() const { return q_vectors() + k_vectors(); }  // per row
  MT_HOST_DEVICE long row() const { return long(H + 2 * KVH) * D; }
};
}  // namespace mt

namespace mt::cpu {

// qkv = raw with q and k normalised and v copied.
template <typename T>
void qk_norm_forward(T* qkv, T* rstd, const T* raw, const T* wq, const T* wk, const QkNormShape& s, float eps,
                     float offset);

// draw = dL/draw from dqkv (q and k through the norms, v copied): overwritten; dwq and dwk
// accumulate, summed over rows in row order.
template <typename T>
void qk_norm_backward(T* draw, T* dwq, T* dwk, const T* dqkv, const T* raw, const T* wq, const T* wk, const T* rstd,
                      const QkNormShape& s, float offset);

}  // namespace mt::cpu

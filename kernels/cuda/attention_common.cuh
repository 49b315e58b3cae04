// Internal to the attention .cu files: geometry of fused qkv rows and shared-memory tiles.
#pragma once
#include <cstdint>

#include "kernels/cuda/device_util.cuh"

namespace mt::cuda::attn {

constexpr int kKeys = 32;  // keys per tile (one per lane)

struct Geo {
  int B, T, H, KVH, D;
  float scale;
  const int32_t* pos;  // [B*T] positions within documents, or nullptr (one document per row)
  int window = 0;      // sliding window of keys per query (kernels/attention.h), 0 = none
  float softcap = 0;   // s -> softcap * tanh(s / softcap) of the scaled score, 0 = none
  // The scaled (and capped) score of a raw dot product, and d(score)/d(scaled dot).
  __device__ float score(float dot) const {
    const float s = dot * scale;
    return softcap > 0 ? softcap * tanhf(s / softcap) : s;
  }
  __device__ float score_slope(float z) const {
    return softcap > 0 ? 1.f - (z / softcap) * (z / softcap) : 1.f;
  }
  // First key query t of sequence b may see: the start of its document, or of its window.
  __device__ int start(int b, int t) const {
    const int doc = pos ? min(max(t - pos[long(b) * T + t], 0), t) : 0;
    return window > 0 ? max(doc, t - window + 1) : doc;
  }
  // Smallest start among queries [t0, t0 + n) clamped to T: keys before it are seen by none.
  __device__ int min_start(int b, int t0, int n) const {
    int lo = t0;
    for (int i = 0; i < n && t0 + i < T; ++i) lo = min(lo, start(b, t0 + i));
    return lo;
  }
  __host__ __device__ long row() const { return long(H + 2 * KVH) * D; }  // qkv row length
  __host__ __device__ long q_off(int h) const { return long(h) * D; }
  __host__ __device__ long k_off(int g) const { return long(H + g) * D; }
  __host__ __device__ long v_off(int g) const { return long(H + KVH + g) * D; }
  __host__ __device__ long orow() const { return long(H) * D; }  // out / dout row length
};

// dst[r][0:D] (row stride `stride`) = rows k0.. of src (stride `src_row`), zero past T.
// Cooperative over the whole block.
template <typename T>
__device__ void load_tile(float* dst, int stride, const T* src, long src_row, int k0, int T_, int D) {
  for (int e = threadIdx.x; e < kKeys * stride; e += blockDim.x) {
    const int r = e / stride, d = e % stride;
    const int t = k0 + r;
    dst[e] = (t < T_ && d < D) ? detail::ld(src[long(t) * src_row + d]) : 0.f;
  }
}

// One warp: dst[0:D] = src[0:D] (zero-filled when !valid).
template <typename T>
__device__ void load_row(float* dst, const T* src, int D, bool valid) {
  for (int d = threadIdx.x & 31; d < D; d += 32) dst[d] = valid ? detail::ld(src[d]) : 0.f;
}

__device__ __forceinline__ float dot_row(const float* a, const float* b, int D) {
  float s = 0.f;
  for (int d = 0; d < D; ++d) s += a[d] * b[d];
  return s;
}

}  // namespace mt::cuda::attn

// The tiling and masking rules of the tensor-core attention (attention_mma.cuh), in plain C++ so
// that the CUDA kernels and a host emulation (tests/kernels/attention_tiles_test.cc) share them:
// which key tiles a query tile visits, which query tiles a key tile skips, which keys a row sees.
#pragma once
#include <climits>

#if defined(__CUDACC__)
#define MT_ATTN_HD __host__ __device__ __forceinline__
#else
#define MT_ATTN_HD inline
#endif

namespace mt::cuda::attn {

constexpr int kTile = 64;  // query rows per block == keys per tile (aligned: causal cuts only the last tile)
constexpr float kLog2e = 1.4426950408889634f;

// Keys query row t sees: first ..= last, its document start (`start`, t - pos[t] clamped to
// [0, t]) to t; none (first > last) for a row at or past T, a tile's padding.
struct Range {
  int first, last;
};
MT_ATTN_HD Range row_range(int t, int T, int start) { return t < T ? Range{start, t} : Range{INT_MAX, -1}; }
MT_ATTN_HD bool sees(Range r, int key) { return key >= r.first && key <= r.last; }

// Key tiles of the query tile at q0: from the tile holding its smallest row start (`min_first`,
// over the tile's rows) to its diagonal. Each row's keys are contiguous and end at the row, so
// every tile in between is seen by some row: none is fully masked.
MT_ATTN_HD int key_tile_begin(int min_first) { return min_first / kTile * kTile; }
MT_ATTN_HD int key_tile_end(int q0, int T) { return q0 + kTile < T ? q0 + kTile : T; }

// A key tile's blocks visit query tiles from its own (causal) to T, skipping one whose rows all
// start after the key tile (other documents).
MT_ATTN_HD bool query_tile_skipped(int min_first, int k0) { return min_first >= k0 + kTile; }

// Under a sliding window of `window` keys (0: none) row t sees keys from t - window + 1, so the
// rows from k0 + keys + window - 1 on see none of the key tile [k0, k0 + keys): a key tile's
// blocks stop there instead of at T (a 1,024-key window at T = 32K: ~17 of 512 query tiles).
MT_ATTN_HD int query_rows_end(int k0, int keys, int T, int window) {
  if (window <= 0) return T;
  const long end = long(k0) + keys + window - 1;
  return end < T ? int(end) : T;
}

}  // namespace mt::cuda::attn

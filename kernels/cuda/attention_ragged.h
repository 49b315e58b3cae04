// The ragged (THD) layout CudnnAttention hands cuDNN for packed documents: one call per row of
// the micro-batch, the row's documents padded with empty ones to a power-of-two batch, each
// with its length and the element offsets of its first token — relative to the row's own base
// pointers in the fused qkv rows, the out rows and the row's [H, T] lse. Host and device
// functions (the index kernel, attention_cudnn_meta.cu, and the CPU tests compute the same).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/attention.h"

#ifdef __CUDACC__
#define MT_HOST_DEVICE __host__ __device__
#else
#define MT_HOST_DEVICE
#endif

namespace mt::cuda::ragged {

struct Geometry {
  int T, H, KVH, D;
  MT_HOST_DEVICE int64_t qkv_row() const { return int64_t(H + 2 * KVH) * D; }
  MT_HOST_DEVICE int64_t out_row() const { return int64_t(H) * D; }
};

// Entry i (0 <= i <= batch) of row `row`'s arrays, whose documents are starts[first ..
// first + count) (tokens b*T + t of the micro-batch; starts[first + count] is the row's end).
// Entries past the documents are empty documents at the row's end; entry `batch` ends the arrays.
struct Entry {
  int32_t seq;  // the document's length (meaningful for i < batch)
  int64_t qkv, out, lse;
};
MT_HOST_DEVICE inline Entry entry(const int32_t* starts, int first, int count, int row, Geometry g, int i) {
  const int d = i < count ? i : count;
  const int64_t t0 = int64_t(starts[first + d]) - int64_t(row) * g.T;  // the document's first token in its row
  const int32_t seq = i < count ? starts[first + i + 1] - starts[first + i] : 0;
  return {seq, t0 * g.qkv_row(), t0 * g.out_row(), t0};
}

// Element offsets of row b's first token in qkv, out and lse.
struct RowBase {
  int64_t qkv, out, lse;
};
inline RowBase row_base(int row, Geometry g) {
  const int64_t t = int64_t(row) * g.T;
  return {t * g.qkv_row(), t * g.out_row(), int64_t(row) * g.H * g.T};
}

inline int pow2_at_least(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

// One row's call: its graph's batch (documents rounded up to a power of two) and sequence
// length (the longest document rounded up, at most T), and which documents it holds.
struct RowCall {
  int batch, seq, row, first, count;
};
inline std::vector<RowCall> row_calls(int B, int T, const DocumentSpans& docs) {
  std::vector<RowCall> calls;
  int i = 0;
  for (int b = 0; b < B; ++b) {
    const int first = i, end = (b + 1) * T;
    int longest = 0;
    for (; i < docs.count && docs.starts[i] < end; ++i) longest = std::max(longest, docs.starts[i + 1] - docs.starts[i]);
    calls.push_back({pow2_at_least(i - first), std::min(pow2_at_least(longest), T), b, first, i - first});
  }
  return calls;
}

}  // namespace mt::cuda::ragged

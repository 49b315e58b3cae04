// The ragged (THD) layout CudnnAttention hands cuDNN for packed documents: calls of a row's
// consecutive documents (one a row unless its dP would outgrow a dense row's, row_calls),
// batched exactly or padded with empty ones to a power of two (batch_for), each with its length
// and the element offsets of its first token — relative to the row's own base pointers in the
// fused qkv rows, the out rows and the row's token-major statistics (stats_index). Host and
// device functions (the index and transpose kernels, attention_cudnn_meta.cu, and the CPU tests
// compute the same).
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
// Entries past the documents (batch_for's padding) are empty documents at the call's end; entry
// `batch` ends the arrays.
struct Entry {
  int32_t seq;  // the document's length (meaningful for i < batch)
  int64_t qkv, out, lse;  // lse: into the row's token-major [T, H] statistics (stats_index)
};
MT_HOST_DEVICE inline Entry entry(const int32_t* starts, int first, int count, int row, Geometry g, int i) {
  const int d = i < count ? i : count;
  const int64_t t0 = int64_t(starts[first + d]) - int64_t(row) * g.T;  // the document's first token in its row
  const int32_t seq = i < count ? starts[first + i + 1] - starts[first + i] : 0;
  return {seq, t0 * g.qkv_row(), t0 * g.out_row(), t0 * g.H};
}

// Element offsets of row b's first token in qkv, out and the token-major statistics.
struct RowBase {
  int64_t qkv, out, lse;
};
inline RowBase row_base(int row, Geometry g) {
  const int64_t t = int64_t(row) * g.T;
  return {t * g.qkv_row(), t * g.out_row(), t * g.H};
}

// Packed rows hand cuDNN their statistics token-major, [B, T, H] (a token's heads contiguous,
// stride {H*S, 1, H, 1} with offsets t0*H): the layout TransformerEngine and PyTorch declare
// for ragged Stats and NVIDIA tests. The head-major ragged layout ours would need ([H, T] a
// row, offsets t0) is little exercised, and its backward read was broken up to cuDNN 9.26
// (cudnn-frontend PR #462). Element i of the token-major array is element stats_index(i) of
// our [B, H, T] lse.
MT_HOST_DEVICE inline int64_t stats_index(int64_t i, int T, int H) {
  const int64_t token = i / H, h = i % H;
  return (token / T * H + h) * T + token % T;
}

inline int pow2_at_least(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

// Elements of the deterministic backward's dP workspace per head for b documents of at most
// s tokens: cuDNN < 9.25 on sm_90 keeps dP whole, b x s x s padded to 128 (the frontend's
// formula; for ragged layouts a lower bound).
inline int64_t dp_elems(int b, int s) {
  const int64_t r = (int64_t(s) + 127) / 128 * 128;
  return int64_t(b) * r * r;
}

// A call's sequence length for its longest document: a power of two (so few graphs serve every
// batch), at least 2 (cuDNN's backward refuses s = 1 for q and kv), at most T.
inline int seq_for(int longest, int T) { return std::min(std::max(pow2_at_least(longest), 2), T); }

// A call's batch for n documents. Padded with empty documents (length 0) to a power of two, a
// few graphs serve every batch; but cuDNN takes zero-length sequences only from 9.25 (NVIDIA
// gates them there: cudnn-frontend test_sdpa_edge_cases.py; issue #943 saw NaN rows on 9.22),
// so below it the batch is exactly the documents (batch_for(n, false) = n; row_calls then splits
// a group into power-of-two batches, so as few graphs serve it as padding would need).
inline int batch_for(int n, bool pad) { return pad ? pow2_at_least(n) : n; }

// One call: its graph's batch (batch_for) and sequence length (seq_for), and which documents it
// holds — consecutive ones of one row.
struct RowCall {
  int batch, seq, row, first, count;
};

inline int longest_of(const DocumentSpans& docs, int first, int count) {
  int l = 0;
  for (int i = first; i < first + count; ++i) l = std::max(l, docs.starts[i + 1] - docs.starts[i]);
  return l;
}

// A group of `count` consecutive documents as calls: padded, one; exactly (no empty documents),
// one per power of two in count (13 documents: 8, 4 and 1), each sequence its own longest
// document's: the graphs stay the few of powers-of-two batches and lengths, not one pair per
// document count a packing happens to produce (each built mid-step).
inline void push_group(std::vector<RowCall>& calls, const DocumentSpans& docs, int T, int row, int first, int count,
                       bool pad) {
  if (pad) {
    calls.push_back({batch_for(count, true), seq_for(longest_of(docs, first, count), T), row, first, count});
    return;
  }
  for (int part = pow2_at_least(count); part >= 1; part /= 2) {
    if (!(count & part)) continue;
    calls.push_back({part, seq_for(longest_of(docs, first, part), T), row, first, part});
    first += part;
  }
}

// The calls of B rows of T tokens: each row's documents in order, grouped so that no call's dP
// exceeds a dense row's (dp_elems(1, T); for short rows 16 tiles of 128 x 128, which the
// workspace's fixed margin holds) unless it holds a single document. Without grouping a row of
// one long document and many short ones (batch ~ documents, seq ~ T) would need ~T^3.
inline std::vector<RowCall> row_calls(int B, int T, const DocumentSpans& docs, bool pad) {
  const int64_t cap = std::max(dp_elems(1, T), dp_elems(16, 128));
  std::vector<RowCall> calls;
  int i = 0;
  for (int b = 0; b < B; ++b) {
    const int end = (b + 1) * T;
    while (i < docs.count && docs.starts[i] < end) {
      const int first = i;
      int longest = 0;
      for (; i < docs.count && docs.starts[i] < end; ++i) {
        const int l = std::max(longest, docs.starts[i + 1] - docs.starts[i]);
        if (i > first && dp_elems(batch_for(i - first + 1, pad), seq_for(l, T)) > cap) break;
        longest = l;
      }
      push_group(calls, docs, T, b, first, i - first, pad);
    }
  }
  return calls;
}

}  // namespace mt::cuda::ragged

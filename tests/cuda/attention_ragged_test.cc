// The ragged layout CudnnAttention gives cuDNN (kernels/cuda/attention_ragged.h), checked on the
// CPU — no device needed: for random packings, under both batchings (padded with empty
// documents to a power of two, or exactly the documents in power-of-two calls: push_group), each row becomes calls of
// its consecutive documents whose batch and sequence length bound them and whose dP (the deterministic
// backward's workspace) stays within a dense row's, and cuDNN's addressing through the offsets (a document's
// token j, head h, element d at base + offset + j * row stride + h * D + d; its statistic
// token-major at stats base + offset + j * H + h, transposed by stats_index) lands on exactly the
// elements our kernels use for that token.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <tuple>

#include "kernels/attention.h"
#include "kernels/cuda/attention_ragged.h"

namespace mt {
namespace {

using namespace cuda::ragged;

std::vector<int32_t> random_positions(std::mt19937& rng, int B, int T) {
  std::vector<int32_t> pos;
  for (int b = 0; b < B; ++b) {
    int p = int(rng() % 3), left = 1 + int(rng() % 12);
    for (int t = 0; t < T; ++t, ++p) {
      if (left-- == 0) p = 0, left = int(rng() % 12);
      pos.push_back(p);
    }
  }
  return pos;
}

class CudnnRaggedBatching : public ::testing::TestWithParam<bool> {};  // true: padded to powers of two

TEST_P(CudnnRaggedBatching, RowCallsBoundTheirDocuments) {
  const bool pad = GetParam();
  std::mt19937 rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    const int B = 1 + int(rng() % 4), T = 1 + int(rng() % (trial % 4 ? 70 : 400));  // some rows split
    const auto pos = random_positions(rng, B, T);
    const auto st = document_starts(pos.data(), B, T);
    ASSERT_FALSE(st.empty());
    const DocumentSpans docs{st.data(), nullptr, int(st.size()) - 1};
    const auto calls = row_calls(B, T, docs, pad);
    ASSERT_GE(calls.size(), size_t(B));
    int next = 0;
    for (const RowCall& c : calls) {
      EXPECT_EQ(c.first, next) << "rows take the documents in order";
      next += c.count;
      EXPECT_GE(c.count, 1);
      EXPECT_GE(c.batch, c.count);
      EXPECT_EQ(c.batch & (c.batch - 1), 0) << "batch " << c.batch << " is a power of two: few graphs";
      if (!pad) {
        EXPECT_EQ(c.batch, c.count) << "no empty documents";
      }
      EXPECT_EQ(c.seq, seq_for(longest_of(docs, c.first, c.count), T)) << "its own longest document's";
      EXPECT_LE(c.seq, T);
      EXPECT_GE(c.seq, std::min(T, 2)) << "cuDNN's backward refuses s = 1";
      EXPECT_TRUE(c.count == 1 || dp_elems(c.batch, c.seq) <= std::max(dp_elems(1, T), dp_elems(16, 128)))
          << "dP beyond a dense row's";
      for (int i = 0; i < c.count; ++i) {
        const int start = st[size_t(c.first + i)], len = st[size_t(c.first + i + 1)] - start;
        EXPECT_EQ(start / T, c.row) << "a row's call holds only its documents";
        EXPECT_LE(len, c.seq);
      }
    }
    EXPECT_EQ(next, docs.count);
  }
}

TEST_P(CudnnRaggedBatching, OffsetsAddressTheTokensOurKernelsUse) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 40; ++trial) {
    const int B = 1 + int(rng() % 3), T = 1 + int(rng() % 50);
    const Geometry g{T, 4, 2, 8};
    const auto pos = random_positions(rng, B, T);
    const auto st = document_starts(pos.data(), B, T);
    const DocumentSpans docs{st.data(), nullptr, int(st.size()) - 1};
    for (const RowCall& c : row_calls(B, T, docs, GetParam())) {
      const RowBase base = row_base(c.row, g);
      int64_t prev_qkv = -1;
      for (int i = 0; i <= c.batch; ++i) {
        const Entry e = entry(st.data(), c.first, c.count, c.row, g, i);
        EXPECT_GE(e.qkv, prev_qkv) << "offsets never decrease";
        prev_qkv = e.qkv;
        if (i >= c.count) {  // padding: empty documents where the call's documents end
          if (i < c.batch) {
            EXPECT_EQ(e.seq, 0);
          }
          EXPECT_EQ(e.lse, (st[size_t(c.first + c.count)] - int64_t(c.row) * T) * g.H);
          continue;
        }
        const int start = st[size_t(c.first + i)];
        ASSERT_EQ(e.seq, st[size_t(c.first + i + 1)] - start);
        for (int j = 0; j < e.seq; ++j) {
          const int64_t tok = start + j;  // b*T + t
          const int b = int(tok / T), t = int(tok % T);
          for (int h : {0, g.H - 1}) {
            EXPECT_EQ(base.qkv + e.qkv + j * g.qkv_row() + h * g.D, tok * g.qkv_row() + h * g.D);
            EXPECT_EQ(base.out + e.out + j * g.out_row() + h * g.D, tok * g.out_row() + h * g.D);
            const int64_t stat = base.lse + e.lse + int64_t(j) * g.H + h;  // token-major [B, T, H]
            EXPECT_EQ(stat, tok * g.H + h);
            EXPECT_EQ(stats_index(stat, T, g.H), (int64_t(b) * g.H + h) * T + t);  // our lse [B, H, T]
          }
        }
      }
    }
  }
}

// stats_index is a permutation of B x T x H: the transposes between cuDNN's token-major
// statistics and our lse write every element once.
TEST(CudnnRagged, StatsIndexIsAPermutation) {
  for (auto [B, T, H] : {std::tuple{1, 1, 1}, std::tuple{2, 7, 3}, std::tuple{3, 33, 28}}) {
    const int64_t n = int64_t(B) * T * H;
    std::vector<int> hits(size_t(n), 0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t j = stats_index(i, T, H);
      ASSERT_GE(j, 0);
      ASSERT_LT(j, n);
      ++hits[size_t(j)];
    }
    EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), n) << B << " x " << T << " x " << H;
  }
}

// A row of one long document and many short ones: one call would be batch ~ documents by seq ~ T
// (dP ~ T^3); the calls split it so that only a lone document reaches a dense row's dP.
TEST_P(CudnnRaggedBatching, ALongDocumentAmongShortOnesIsSplitOff) {
  const int T = 4096;
  std::vector<int32_t> starts = {0, 3000};
  for (int t = 3007; t < T; t += 7) starts.push_back(t);
  starts.push_back(T);
  const DocumentSpans docs{starts.data(), nullptr, int(starts.size()) - 1};
  const auto calls = row_calls(1, T, docs, GetParam());
  ASSERT_GE(calls.size(), 2u);
  EXPECT_EQ(calls[0].count, 1) << "the long document alone";
  EXPECT_EQ(calls[0].seq, T);
  int64_t most = 0, held = 0;
  for (const RowCall& c : calls) {
    most = std::max(most, dp_elems(c.batch, c.seq));
    held += c.count;
  }
  EXPECT_EQ(held, docs.count);
  EXPECT_LE(most, dp_elems(1, T));
}

INSTANTIATE_TEST_SUITE_P(CudnnRagged, CudnnRaggedBatching, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Padded" : "Exact"; });

}  // namespace
}  // namespace mt

// document_starts (kernels/attention.h): the spans cuDNN's ragged attention takes are exactly
// the documents our kernels mask to — every row starts one, a position 0 starts one, a row
// that begins mid-document starts one at its first token — and positions that are not runs of
// 0, 1, 2, ... (which no ragged batch can express) give no spans at all.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "kernels/attention.h"

namespace mt {
namespace {

// Each token's first visible key as the kernels compute it (kernels/cpu/attention.cc).
int first_key(const std::vector<int32_t>& pos, int T, int i) {
  const int t = i % T;
  return std::clamp(t - pos[size_t(i)], 0, t);
}

TEST(DocumentStarts, NoPositionsNoSpans) { EXPECT_TRUE(document_starts(nullptr, 2, 8).empty()); }

TEST(DocumentStarts, RowsAndDocuments) {
  // Row 0: documents of 3, 1, 4 tokens. Row 1 continues a document (positions 5, 6), then one of 2, then one of 4.
  const std::vector<int32_t> pos = {0, 1, 2, 0, 0, 1, 2, 3, 5, 6, 0, 1, 0, 1, 2, 3};
  EXPECT_EQ(document_starts(pos.data(), 2, 8), (std::vector<int32_t>{0, 3, 4, 8, 10, 12, 16}));
}

TEST(DocumentStarts, EveryTokenItsOwnDocument) {
  const std::vector<int32_t> pos(6, 0);
  EXPECT_EQ(document_starts(pos.data(), 2, 3), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6}));
}

TEST(DocumentStarts, PositionsThatAreNotRunsGiveNoSpans) {
  const std::vector<int32_t> repeats = {0, 1, 1, 2};  // token 2 sees keys 1..2: no document starts at 1
  EXPECT_TRUE(document_starts(repeats.data(), 1, 4).empty());
  // A jump forward stays in the document: token 2 at position 3 would see key -1, clipped to
  // the row's first token, the first key of its predecessors too.
  const std::vector<int32_t> skips = {0, 1, 3, 4};
  EXPECT_EQ(document_starts(skips.data(), 1, 4), (std::vector<int32_t>{0, 4}));
}

// Random packings: within every span each token's first visible key is the span's first token.
TEST(DocumentStarts, SpansAreWhatTheKernelsMaskTo) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    const int B = 1 + int(rng() % 3), T = 1 + int(rng() % 40);
    std::vector<int32_t> pos;
    for (int b = 0; b < B; ++b) {
      int p = int(rng() % 5), left = 1 + int(rng() % 9);  // a row may begin mid-document
      for (int t = 0; t < T; ++t) {
        if (left-- == 0) p = 0, left = int(rng() % 9);
        pos.push_back(p++);
      }
    }
    const auto st = document_starts(pos.data(), B, T);
    ASSERT_GE(st.size(), size_t(B) + 1) << "trial " << trial;
    EXPECT_EQ(st.front(), 0);
    EXPECT_EQ(st.back(), B * T);
    for (size_t d = 0; d + 1 < st.size(); ++d) {
      EXPECT_LT(st[d], st[d + 1]);
      EXPECT_EQ(st[d] / T, (st[d + 1] - 1) / T) << "a document crosses a row";
      for (int i = st[d]; i < st[d + 1]; ++i)
        EXPECT_EQ(first_key(pos, T, i), st[d] % T) << "trial " << trial << " token " << i;
    }
  }
}

}  // namespace
}  // namespace mt

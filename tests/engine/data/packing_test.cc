// Packing of tokenized examples: every token placed exactly once per epoch, positions restarting
// per example, pads and prompt tokens never counted, efficiency, split/truncate, padding without
// packing, and a cursor that names the same rows after seek (resume).
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <random>
#include <set>

#include "engine/data/data_source.h"
#include "engine/data/example_set.h"
#include "engine/data/packing.h"

namespace mt {
namespace {

// Examples whose ids are unique across the set (1, 2, 3, ...; 0 is never a real token, so a pad
// is recognisable), with a loss mask that is 0 on each example's first third ("the prompt").
struct Corpus {
  std::vector<TokenizedExample> ex;
  std::map<int32_t, std::pair<size_t, size_t>> where;  // id -> (example, index)
  int vocab = 1;
  uint64_t tokens = 0, counted = 0;  // counted: targets with loss 1 (every token but an example's first)
};

Corpus make_corpus(const std::vector<size_t>& lengths) {
  Corpus c;
  for (size_t e = 0; e < lengths.size(); ++e) {
    TokenizedExample x;
    for (size_t k = 0; k < lengths[e]; ++k) {
      c.where[c.vocab] = {e, k};
      x.ids.push_back(c.vocab++);
      x.loss.push_back(k >= lengths[e] / 3 ? 1 : 0);
      if (k > 0 && x.loss.back()) ++c.counted;
    }
    c.tokens += lengths[e];
    c.ex.push_back(x);
  }
  return c;
}

std::vector<size_t> random_lengths(size_t n, int T, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> d(std::log(T / 4.0), 1.0);
  std::vector<size_t> v;
  for (size_t i = 0; i < n; ++i) v.push_back(std::max<size_t>(1, size_t(d(rng))));
  v[0] = 1;                    // an example of length 1
  v[1] = size_t(T) * 2 + 3;    // one longer than seq_len
  return v;
}

std::vector<uint64_t> lengths_of(const Corpus& c) {
  std::vector<uint64_t> v;
  for (const auto& e : c.ex) v.push_back(e.ids.size());
  return v;
}

// The pieces no row gets, and how many tokens they hold.
std::vector<PieceStart> barren_of(const Corpus& c, int T, uint64_t* tokens = nullptr) {
  auto barren = barren_pieces(*make_memory_example_set(c.ex, "test"), T, false);
  EXPECT_TRUE(barren.ok());
  if (tokens) {
    *tokens = 0;
    for (const auto& [e, b] : *barren) *tokens += std::min<uint64_t>(c.ex[e].ids.size() - b, uint64_t(T));
  }
  return *barren;
}

// Reads one epoch of rows and checks every placement rule (every token of every piece that is
// not barren exactly once); returns the rows read.
uint64_t check_epoch(const Corpus& c, DataSource& src, int T, bool packing, uint64_t rows) {
  uint64_t left_out = 0;
  barren_of(c, T, &left_out);
  std::set<int32_t> seen;
  uint64_t counted = 0, real = 0;
  for (uint64_t r = 0; r < rows; ++r) {
    Batch b;
    EXPECT_TRUE(src.next_batch(1, T, b).ok());
    EXPECT_TRUE(validate_batch(b, c.vocab).ok());
    EXPECT_EQ(b.positions.empty(), !packing);
    bool in_pad = false;
    for (int t = 0; t < T; ++t) {
      const int32_t id = b.inputs[size_t(t)], tg = b.targets[size_t(t)];
      if (id == 0) {  // padding: at the end of the row, never counted
        in_pad = true;
        EXPECT_EQ(tg, -1) << "a pad is counted at " << t;
        continue;
      }
      EXPECT_FALSE(in_pad) << "a real token after padding";
      EXPECT_TRUE(seen.insert(id).second) << "token " << id << " placed twice in one epoch";
      ++real;
      const auto [e, k] = c.where.at(id);
      const auto& x = c.ex[e];
      if (packing) {
        EXPECT_EQ(b.positions[size_t(t)], int32_t(k % size_t(T))) << "position of token " << id;
      }
      const bool has_next = k + 1 < x.ids.size() && x.loss[k + 1];
      EXPECT_EQ(tg, has_next ? x.ids[k + 1] : -1) << "target of token " << id;
      counted += tg >= 0;
    }
  }
  EXPECT_EQ(seen.size(), c.tokens - left_out) << "every token exactly once per epoch";
  EXPECT_EQ(counted, c.counted) << "targets counted: exactly the masked-in next tokens";
  EXPECT_EQ(real, c.tokens - left_out);
  return rows;
}

TEST(Packing, EveryTokenOncePerEpochPositionsRestartPadsExcluded) {
  const int T = 64;
  const Corpus c = make_corpus(random_lengths(300, T, 7));
  ExampleSourceOptions o;
  o.packing.seed = 11;
  auto src = make_example_source(make_memory_example_set(c.ex, "test"), o);
  const uint64_t rows0 = src->num_sequences(T);
  ASSERT_GT(rows0, 0u);
  check_epoch(c, *src, T, true, rows0);
  uint64_t left_out = 0;
  const auto barren = barren_of(c, T, &left_out);
  EXPECT_FALSE(barren.empty()) << "the case needs a window whose targets are all masked out";
  EXPECT_NEAR(src->packing_efficiency(), double(c.tokens - left_out) / double(rows0 * T), 1e-12);
  // Epoch 1 is a different shuffle, and again every token exactly once.
  const EpochLayout l1 = pack_epoch(lengths_of(c), T, o.packing, 1, barren);
  check_epoch(c, *src, T, true, l1.rows());
  EXPECT_EQ(src->cursor(), rows0 + l1.rows());
}

TEST(Packing, PaddedWithoutPackingOneExamplePerRow) {
  const int T = 32;
  const Corpus c = make_corpus(random_lengths(50, T, 3));
  ExampleSourceOptions o;
  o.packing.packing = false;
  auto src = make_example_source(make_memory_example_set(c.ex, "test"), o);
  uint64_t left_out = 0;
  const auto barren = barren_of(c, T, &left_out);
  const EpochLayout l = pack_epoch(lengths_of(c), T, o.packing, 0, barren);
  uint64_t pieces = 0;
  for (size_t e = 0; e < c.ex.size(); ++e) pieces += (c.ex[e].ids.size() + T - 1) / T;
  pieces -= barren.size();
  EXPECT_EQ(l.rows(), pieces);  // one piece per row
  check_epoch(c, *src, T, false, l.rows());
  EXPECT_NEAR(src->packing_efficiency(), double(c.tokens - left_out) / double(pieces * T), 1e-12);
}

TEST(Packing, LengthOneAndLongerThanSeqLen) {
  const int T = 8;
  const Corpus c = make_corpus({1, 20});  // 20 = 8 + 8 + 4
  PackingOptions o;
  const EpochLayout split = pack_epoch(lengths_of(c), T, o, 0);
  std::vector<uint32_t> piece_lengths;
  for (const Piece& p : split.pieces) piece_lengths.push_back(p.length);
  std::sort(piece_lengths.begin(), piece_lengths.end());
  EXPECT_EQ(piece_lengths, (std::vector<uint32_t>{1, 4, 8, 8}));
  EXPECT_EQ(split.tokens, 21u);
  EXPECT_EQ(split.rows(), 3u);  // 8 | 8 | 4 + 1
  EXPECT_DOUBLE_EQ(split.efficiency(), 21.0 / 24.0);
  // A split piece's last target is the next piece's first token (nothing lost at the cut).
  auto set = make_memory_example_set(c.ex, "t");
  for (uint64_t r = 0; r < split.rows(); ++r) {
    std::vector<int32_t> in(T), tg(T), pos(T);
    ASSERT_TRUE(fill_row(split, r, *set, in.data(), tg.data(), pos.data()).ok());
    for (size_t t = 0; t < size_t(T); ++t) {
      if (in[t] == 0) {  // the last row's 3 pads
        EXPECT_EQ(tg[t], -1);
        continue;
      }
      const auto [e, k] = c.where.at(in[t]);
      const bool next = k + 1 < c.ex[e].ids.size() && c.ex[e].loss[k + 1];
      EXPECT_EQ(tg[t], next ? in[t] + 1 : -1) << "token " << in[t];
    }
  }
  o.truncate = true;
  const EpochLayout trunc = pack_epoch(lengths_of(c), T, o, 0);
  EXPECT_EQ(trunc.tokens, 9u);  // 1 + the first 8
  for (const Piece& p : trunc.pieces) EXPECT_EQ(p.begin, 0u);
}

TEST(Packing, SeekResumesTheSameRowsAcrossEpochs) {
  const int T = 16, G = 3;
  const Corpus c = make_corpus(random_lengths(40, T, 5));
  ExampleSourceOptions o;
  o.packing.seed = 99;
  auto set = std::shared_ptr<const ExampleSet>(make_memory_example_set(c.ex, "t"));
  auto a = make_example_source(set, o);
  std::vector<Batch> ref;
  std::vector<uint64_t> cursors;
  for (int i = 0; i < 40; ++i) {  // several epochs
    cursors.push_back(a->cursor());
    ref.emplace_back();
    ASSERT_TRUE(a->next_batch(G, T, ref.back()).ok());
  }
  ASSERT_GT(a->cursor(), 2 * a->num_sequences(T));
  for (int i : {0, 1, 7, 20, 39}) {
    auto b = make_example_source(set, o);
    ASSERT_TRUE(b->seek(cursors[size_t(i)]).ok());
    Batch got;
    ASSERT_TRUE(b->next_batch(G, T, got).ok());
    EXPECT_EQ(got.inputs, ref[size_t(i)].inputs) << "batch " << i;
    EXPECT_EQ(got.targets, ref[size_t(i)].targets);
    EXPECT_EQ(got.positions, ref[size_t(i)].positions);
  }
}

TEST(Packing, ShuffleDependsOnSeedAndEpoch) {
  const auto a = epoch_order(100, 1, 0), b = epoch_order(100, 1, 1), c = epoch_order(100, 2, 0);
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(a, epoch_order(100, 1, 0));
  std::vector<uint64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<uint64_t> iota(100);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota);  // a permutation
}

TEST(Packing, EpochsEndTheDataWithEmptyRowsThenOutOfRange) {
  const int T = 16;
  const Corpus c = make_corpus({10, 10, 10, 10, 10});
  ExampleSourceOptions o;
  o.epochs = 2;
  auto src = make_example_source(make_memory_example_set(c.ex, "t"), o);
  const uint64_t total = pack_epoch(lengths_of(c), T, o.packing, 0).rows() + pack_epoch(lengths_of(c), T, o.packing, 1).rows();
  const int G = int(total) - 1;  // the second batch runs past the end
  Batch b;
  ASSERT_TRUE(src->next_batch(G, T, b).ok());
  ASSERT_TRUE(src->next_batch(G, T, b).ok());
  EXPECT_EQ(src->cursor(), total);
  long counted_in_last_row = 0;
  for (int t = 0; t < T; ++t) counted_in_last_row += b.targets[size_t(G - 1) * T + size_t(t)] >= 0;
  EXPECT_EQ(counted_in_last_row, 0) << "rows past the end are empty";
  const Status s = src->next_batch(G, T, b);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.to_string();
}

TEST(Packing, FirstFitBeatsOneExamplePerRow) {
  const int T = 128;
  const Corpus c = make_corpus(random_lengths(2000, T, 1));
  PackingOptions packed, padded;
  padded.packing = false;
  const double e_packed = pack_epoch(lengths_of(c), T, packed, 0).efficiency();
  const double e_padded = pack_epoch(lengths_of(c), T, padded, 0).efficiency();
  EXPECT_GT(e_packed, 0.95);
  EXPECT_LT(e_padded, 0.6);
}

// A long prompt split into windows: the windows that hold no completion token are left out, and
// so is the example's last token alone. Trained alone they were rows of loss 0 and gradient 0,
// and a batch of only such rows was an optimizer step on nothing.
TEST(Packing, WindowsWithoutATargetAreLeftOut) {
  const int T = 8;
  TokenizedExample x;  // a prompt of 30 tokens, then a completion of 3
  for (int k = 0; k < 33; ++k) x.ids.push_back(k + 1), x.loss.push_back(k >= 30 ? 1 : 0);
  ExampleSourceOptions o;
  o.packing.packing = false;
  std::shared_ptr<const ExampleSet> set = make_memory_example_set({x}, "long prompt");
  const auto barren = barren_pieces(*set, T, false);
  ASSERT_TRUE(barren.ok());
  // windows [0,8) [8,16) [16,24) have targets 1..24: none counted; [24,32) has 30..32; [32,33),
  // the last token alone, has no target at all
  EXPECT_EQ(*barren, (std::vector<PieceStart>{{0, 0}, {0, 8}, {0, 16}, {0, 32}}));
  auto src = make_example_source(set, o);
  EXPECT_EQ(src->num_sequences(T), 1u);
  for (int epoch = 0; epoch < 3; ++epoch) {  // the one row that trains, epoch after epoch
    Batch b;
    ASSERT_TRUE(src->next_batch(1, T, b).ok());
    EXPECT_EQ(b.inputs[0], 25);
    EXPECT_EQ(std::count_if(b.targets.begin(), b.targets.end(), [](int32_t t) { return t >= 0; }), 3);
  }
  // A set whose every target counts is not read: only its lone last tokens are barren (33 = 4 * 8 + 1).
  TokenizedExample text = x;
  std::fill(text.loss.begin(), text.loss.end(), uint8_t(1));
  EXPECT_EQ(*barren_pieces(*make_memory_example_set({text}, "text"), T, false), (std::vector<PieceStart>{{0, 32}}));
  // truncated, the example is its first window, all prompt
  EXPECT_EQ(*barren_pieces(*set, T, true), (std::vector<PieceStart>{{0, 0}}));
}

// Short examples with no counted target: a one-token example (an empty text is its EOS alone) and
// an empty completion (its prompt all context, and no EOS: the byte tokenizer's). Padded, each was
// a whole row of loss 0; with a global batch of one, a step that trained on nothing.
TEST(Packing, ShortExamplesWithoutATargetAreLeftOut) {
  const int T = 16;
  TokenizedExample one{{7}, {1}}, empty_completion{{3, 4, 5}, {0, 0, 0}}, trains{{3, 4, 5}, {0, 1, 1}};
  std::shared_ptr<const ExampleSet> set = make_memory_example_set({one, empty_completion, trains}, "sft");
  EXPECT_EQ(*barren_pieces(*set, T, false), (std::vector<PieceStart>{{0, 0}, {1, 0}}));
  EXPECT_EQ(*barren_pieces(*set, T, true), (std::vector<PieceStart>{{0, 0}, {1, 0}}));
  for (bool packing : {false, true}) {
    ExampleSourceOptions o;
    o.packing.packing = packing;
    auto src = make_example_source(set, o);
    EXPECT_EQ(src->num_sequences(T), 1u) << packing;
    for (int step = 0; step < 4; ++step) {  // every step trains: the one example that can
      Batch b;
      ASSERT_TRUE(src->next_batch(1, T, b).ok());
      EXPECT_EQ(b.inputs[0], 3) << packing;
      EXPECT_EQ(std::count_if(b.targets.begin(), b.targets.end(), [](int32_t t) { return t >= 0; }), 2) << packing;
    }
  }
}

}  // namespace
}  // namespace mt

// Host emulation of the tensor-core bf16 attention (kernels/cuda/attention_mma_*.cu), so that
// its tiling, masking and rounding are checked on every machine, not only where a GPU runs the
// CUDA tests (tests/cuda/attention_mma_test.cc):
//  * TileBounds: the loop bounds of kernels/cuda/attention_tiles.h — the key tiles each query
//    tile visits (forward, dQ) and the query tiles each key tile visits (dK/dV) — cover every
//    visible (query, key) pair exactly once and visit no tile that no row sees, for T around
//    and across tile edges and packed documents (length 1, at the first and the last token).
//  * Numerics: the kernels' algorithm step by step (tests/kernels/attention_mma_emulation.h)
//    against the CPU reference in double: with P and dS in fp32 it meets the CUDA tests'
//    tolerances (1/128 out, 1e-5 lse, 1/64 dqkv); with P and dS rounded to bf16 as the kernels
//    do, those plus the derived rounding bound u * sum|terms|. The plain tolerances do not hold
//    then: where a gradient's terms cancel (early keys, seen by every later query, T = 517, 8
//    heads per kv head) the rounding reaches 2.2 x 1/64 of rms. So the CUDA test uses the bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <climits>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/cuda/attention_tiles.h"
#include "tests/kernels/attention_mma_emulation.h"

namespace mt {
namespace {

using cuda::attn::kTile;
using cuda::attn::Range;

// Documents of random lengths 1..max_len, the first of length 1, a new one at the last token.
std::vector<int32_t> documents(int B, int T, int max_len, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> pos;
  for (int b = 0; b < B; ++b) {
    int p = 0, left = 1;
    for (int t = 0; t < T; ++t) {
      if (left == 0 || t == T - 1) p = 0, left = 1 + int(rng() % uint32_t(max_len));
      pos.push_back(p++);
      --left;
    }
  }
  return pos;
}

// The kernels' row ranges of query tile t0 of one sequence (pos: its positions, or nullptr).
std::vector<Range> ranges_of(const int32_t* pos, int T, int t0) {
  return attn_emulation::Problem{1, T, 1, 1, 64, pos}.ranges(0, t0);
}
using attn_emulation::min_first;
long pairs_in(const std::vector<Range>& r, int k0) {  // visible (row, key) pairs with key in tile k0
  long n = 0;
  for (const Range& x : r)
    for (int j = 0; j < kTile; ++j) n += cuda::attn::sees(x, k0 + j);
  return n;
}

TEST(AttentionTiles, BoundsCoverEveryVisiblePairOnceAndSkipEmptyTiles) {
  for (int T : {1, 2, 17, 63, 64, 65, 128, 333, 517, 1000})
    for (int docs : {0, 1, 40, 150}) {  // 0: one sequence; else documents of length <= docs
      SCOPED_TRACE(testing::Message() << "T=" << T << " docs<=" << docs);
      const auto pos_v = docs ? documents(1, T, docs, uint32_t(T + docs)) : std::vector<int32_t>{};
      const int32_t* pos = docs ? pos_v.data() : nullptr;
      long visible = 0;
      for (int t = 0; t < T; ++t) visible += t - (pos ? t - pos[t] : 0) + 1;
      long by_query_tiles = 0, by_key_tiles = 0;
      for (int q0 = 0; q0 < T; q0 += kTile) {  // forward and dQ
        const auto r = ranges_of(pos, T, q0);
        for (int k0 = cuda::attn::key_tile_begin(min_first(r)); k0 < cuda::attn::key_tile_end(q0, T); k0 += kTile) {
          const long n = pairs_in(r, k0);
          EXPECT_GT(n, 0) << "query tile " << q0 << " visits key tile " << k0 << " that no row sees";
          by_query_tiles += n;
        }
      }
      for (int k0 = 0; k0 < T; k0 += kTile)  // dK / dV
        for (int t0 = k0; t0 < T; t0 += kTile) {
          const auto r = ranges_of(pos, T, t0);
          const long n = pairs_in(r, k0);
          if (cuda::attn::query_tile_skipped(min_first(r), k0))
            EXPECT_EQ(n, 0) << "key tile " << k0 << " skips query tile " << t0 << " that sees it";
          else
            by_key_tiles += n;
        }
      // Query tiles before the key tile see none of it (causal): the dK/dV loop starts at k0.
      EXPECT_EQ(by_query_tiles, visible);
      EXPECT_EQ(by_key_tiles, visible);
    }
}

// The dK/dV loops' end under a sliding window (query_rows_end): every query tile past it sees
// none of the key tile, and the tiles before it hold every visible pair — for both kernels'
// tile shapes (the tensor-core kernel's 64 x 64, the SIMT one's keys x rows), windows shorter,
// equal to and longer than a tile, with and without packed documents.
TEST(AttentionTiles, AWindowedKeyTileStopsWhereNoRowSeesIt) {
  for (const auto& [keys, rows] : {std::pair{kTile, kTile}, std::pair{32, 8}})  // 32 keys x 8 rows: attention_bwd.cu
    for (int W : {1, 2, 7, 63, 64, 65, 200})
      for (int T : {1, 65, 333, 517})
        for (int docs : {0, 40}) {
          SCOPED_TRACE(testing::Message() << "keys=" << keys << " rows=" << rows << " W=" << W << " T=" << T
                                          << " docs<=" << docs);
          const auto pos = docs ? documents(1, T, docs, uint32_t(T + W)) : std::vector<int32_t>{};
          auto seen = [&](int t, int j) {  // causal, same document, inside the window
            const int doc = docs ? t - pos[size_t(t)] : 0;
            return j <= t && j >= std::max(doc, t - W + 1);
          };
          long visible = 0, visited = 0;
          for (int t = 0; t < T; ++t)
            for (int j = 0; j < T; ++j) visible += seen(t, j);
          for (int k0 = 0; k0 < T; k0 += keys) {
            const int end = cuda::attn::query_rows_end(k0, keys, T, W);
            for (int t0 = k0; t0 < T; t0 += rows)
              for (int t = t0; t < std::min(t0 + rows, T); ++t)
                for (int j = k0; j < std::min(k0 + keys, T); ++j) {
                  if (t0 < end) visited += seen(t, j);
                  else EXPECT_FALSE(seen(t, j)) << "row " << t << " sees key " << j << " past the end " << end;
                }
          }
          EXPECT_EQ(visited, visible);
        }
}

// Worst |got - ref| / (2^-7 (|ref| + rms(ref)) + u * bound): at most 1 when every element is
// inside the CUDA tests' tolerance widened by the derived rounding bound (bound empty: none).
double worst_ratio(const std::vector<float>& got, const std::vector<double>& ref, double rtol,
                   const std::vector<float>& bound) {
  double ss = 0, worst = 0;
  for (double r : ref) ss += r * r;
  const double rms = std::sqrt(ss / double(ref.size()));
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = rtol * (std::fabs(ref[i]) + rms) + (bound.empty() ? 0 : attn_emulation::kRoundoff * bound[i]);
    const double e = std::fabs(double(got[i]) - ref[i]) / tol;
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  return worst;
}

struct Shape {
  int B, T, H, KVH, D, docs;
};

// The emulated kernels against the CPU reference in double on the same bf16 inputs, with the
// CUDA test's tolerances: without operand rounding (tiling, masking, online softmax alone), and
// with it, widened by u * bound (attention_mma_emulation.h).
void check_emulation(const Shape& s, bool round) {
  SCOPED_TRACE(testing::Message() << "B=" << s.B << " T=" << s.T << " H=" << s.H << " KVH=" << s.KVH << " D=" << s.D
                                  << " docs<=" << s.docs << (round ? " bf16 P, dS" : " fp32 P, dS"));
  const size_t rows = size_t(s.B) * s.T, nqkv = rows * (s.H + 2 * s.KVH) * s.D, nout = rows * s.H * s.D;
  std::mt19937 rng(uint32_t(s.T));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> qkv(nqkv), dout(nout);
  for (auto& v : qkv) v = attn_emulation::r16(2.f * u(rng));  // the CUDA test's ranges
  for (auto& v : dout) v = attn_emulation::r16(u(rng));
  const auto pos_v = s.docs ? documents(s.B, s.T, s.docs, 7) : std::vector<int32_t>{};
  const int32_t* pos = s.docs ? pos_v.data() : nullptr;
  attn_emulation::Problem pr{s.B, s.T, s.H, s.KVH, s.D, pos, round};
  const auto f = attn_emulation::forward(pr, qkv);
  std::vector<float> out_b(nout);  // as the kernel stores it
  for (size_t i = 0; i < nout; ++i) out_b[i] = attn_emulation::r16(f.out[i]);
  auto b = attn_emulation::backward(pr, qkv, dout, out_b, f.lse);
  for (auto& v : b.dqkv) v = attn_emulation::r16(v);
  const std::vector<double> qd(qkv.begin(), qkv.end()), dod(dout.begin(), dout.end()), outd(out_b.begin(), out_b.end());
  std::vector<double> out(nout), lse(f.lse.size()), dqkv(nqkv);
  cpu::attention_forward(out.data(), lse.data(), qd.data(), pos, s.B, s.T, s.H, s.KVH, s.D);
  cpu::attention_backward(dqkv.data(), dod.data(), qd.data(), outd.data(), lse.data(), pos, s.B, s.T, s.H, s.KVH, s.D);
  const std::vector<float> none;
  const double e_out = worst_ratio(out_b, out, 1.0 / 128, round ? f.bound : none);
  const double e_lse = worst_ratio(f.lse, lse, 1e-5, none);
  const double e_grad = worst_ratio(b.dqkv, dqkv, 1.0 / 64, round ? b.bound : none);
  std::printf("    %s: worst error / tolerance: out %.3f, lse %.3f, dqkv %.3f\n", round ? "bf16 P, dS" : "fp32 P, dS",
              e_out, e_lse, e_grad);
  EXPECT_LE(e_out, 1.0) << "out";
  EXPECT_LE(e_lse, 1.0) << "lse";
  EXPECT_LE(e_grad, 1.0) << "dqkv";
}

TEST(AttentionTiles, EmulatedKernelsMatchTheReference) {
  for (const Shape s : {Shape{2, 333, 4, 2, 64, 70}, Shape{1, 517, 8, 1, 128, 0}, Shape{2, 17, 2, 2, 128, 5},
                        Shape{1, 1, 4, 2, 64, 0}, Shape{1, 700, 2, 1, 128, 200}})
    for (bool round : {false, true}) check_emulation(s, round);
}

}  // namespace
}  // namespace mt

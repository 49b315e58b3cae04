// Host emulation of the tensor-core bf16 attention (kernels/cuda/attention_mma_*.cu), step by
// step in fp32 with the kernels' own tile bounds (kernels/cuda/attention_tiles.h): scores of the
// bf16 inputs summed in fp32, online softmax in log2 units, P and dS rounded to bf16 where they
// are tensor-core operands, fp32 accumulators. Besides the results it returns, per element, the
// sum of the absolute values of the terms whose operand was rounded (`bound`):
//   out_t    = sum_j bf16(p_j) v_j / l     bound = sum_j p_j |v_j| / l
//   dV_j     = sum_i bf16(P_ij) dO_i        bound = sum_i P_ij |dO_i|
//   dK_j     = sum_i bf16(dS_ij) q_i        bound = sum_i |dS_ij| |q_i|
//   dQ_i     = sum_j bf16(dS_ij) k_j        bound = sum_j |dS_ij| |k_j|
// Rounding to bf16 (round to nearest even) changes a value by at most u = 2^-8 of itself, so the
// rounded operands move each result by at most u * bound: the tests' derived tolerance.
// Used by tests/kernels/attention_tiles_test.cc and tests/cuda/attention_mma_test.cc.
#pragma once
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/cuda/attention_tiles.h"

namespace mt::attn_emulation {

using cuda::attn::kLog2e;
using cuda::attn::kTile;
using cuda::attn::Range;

constexpr double kRoundoff = 1.0 / 256;  // u of bf16: 8 significant bits

inline float r16(float x) { return bf16_to_float(float_to_bf16(x)); }

struct Problem {
  int B, T, H, KVH, D;
  const int32_t* pos;  // [B*T] or nullptr
  bool round = true;   // false: P and dS stay fp32 (the tiling and softmax alone)
  size_t row() const { return size_t(H + 2 * KVH) * D; }
  size_t orow() const { return size_t(H) * D; }
  float scale() const { return float(1.0 / std::sqrt(double(D))); }
  // The kernels' row ranges of query tile t0 of sequence b.
  std::vector<Range> ranges(int b, int t0) const {
    std::vector<Range> r(kTile);
    for (int i = 0; i < kTile; ++i) {
      const int t = t0 + i;
      const int start = t < T && pos ? std::clamp(t - pos[size_t(b) * T + t], 0, t) : 0;
      r[size_t(i)] = cuda::attn::row_range(t, T, start);
    }
    return r;
  }
};

inline int min_first(const std::vector<Range>& r) {
  int lo = INT_MAX;
  for (const Range& x : r) lo = std::min(lo, x.first);
  return lo;
}

inline float dot(const float* a, const float* b, int D) {
  float acc = 0.f;
  for (int d = 0; d < D; ++d) acc += a[d] * b[d];
  return acc;
}

// fn(0) .. fn(n - 1) on all hardware threads (each index writes its own outputs).
inline void parallel_for(int n, const std::function<void(int)>& fn) {
  const int workers = std::max(1, std::min(n, int(std::thread::hardware_concurrency())));
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w)
    pool.emplace_back([&, w] {
      for (int i = w; i < n; i += workers) fn(i);
    });
  for (auto& t : pool) t.join();
}

struct Forward {
  std::vector<float> out, lse, bound;  // out before its bf16 rounding; lse natural log
};

// The forward kernel's blocks, one per (sequence, head) at a time.
inline Forward forward(const Problem& pr, const std::vector<float>& qkv) {
  const int D = pr.D, T = pr.T;
  Forward f{std::vector<float>(size_t(pr.B) * T * pr.orow()), std::vector<float>(size_t(pr.B) * pr.H * T),
            std::vector<float>(size_t(pr.B) * T * pr.orow())};
  const float sl2 = pr.scale() * kLog2e;
  parallel_for(pr.B * pr.H, [&](int bh) {
    const int b = bh / pr.H, h = bh % pr.H, g = h / (pr.H / pr.KVH);
    auto at = [&](int t, int head) { return &qkv[(size_t(b) * T + t) * pr.row() + size_t(head) * D]; };
    std::vector<float> s(kTile), o(static_cast<size_t>(D)), a(static_cast<size_t>(D));
    for (int q0 = 0; q0 < T; q0 += kTile) {
      const auto r = pr.ranges(b, q0);
      const int k_begin = cuda::attn::key_tile_begin(min_first(r)), k_end = cuda::attn::key_tile_end(q0, T);
      for (int i = 0; i < kTile && q0 + i < T; ++i) {
        float m = -INFINITY, l = 0.f;
        std::fill(o.begin(), o.end(), 0.f);
        std::fill(a.begin(), a.end(), 0.f);
        for (int k0 = k_begin; k0 < k_end; k0 += kTile) {
          float mx = -INFINITY, sum = 0.f;
          for (int j = 0; j < kTile; ++j) {
            s[size_t(j)] = cuda::attn::sees(r[size_t(i)], k0 + j) ? dot(at(q0 + i, h), at(k0 + j, pr.H + g), D) * sl2
                                                                  : -INFINITY;
            mx = std::max(mx, s[size_t(j)]);
          }
          const float m_new = std::max(m, mx), m_use = m_new == -INFINITY ? 0.f : m_new;
          const float factor = std::exp2(m - m_use);
          for (int d = 0; d < D; ++d) o[size_t(d)] *= factor, a[size_t(d)] *= factor;
          for (int j = 0; j < kTile; ++j) {
            const float p = std::exp2(s[size_t(j)] - m_use);
            if (p == 0.f) continue;
            sum += p;
            const float pr16 = pr.round ? r16(p) : p, *v = at(k0 + j, pr.H + pr.KVH + g);
            for (int d = 0; d < D; ++d) o[size_t(d)] += pr16 * v[d], a[size_t(d)] += p * std::fabs(v[d]);
          }
          l = l * factor + sum;
          m = m_new;
        }
        const size_t dst = (size_t(b) * T + q0 + i) * pr.orow() + size_t(h) * D;
        for (int d = 0; d < D; ++d) f.out[dst + d] = o[size_t(d)] / l, f.bound[dst + d] = a[size_t(d)] / l;
        f.lse[(size_t(b) * pr.H + h) * T + q0 + i] = (m + std::log2(l)) / kLog2e;
      }
    }
  });
  return f;
}

struct Backward {
  std::vector<float> dqkv, bound;  // dqkv before its bf16 rounding
};

// The backward kernels: dQ per (sequence, head), dK / dV per (sequence, kv head). `out` is the
// output the forward stored (bf16 values), `lse` its lse.
inline Backward backward(const Problem& pr, const std::vector<float>& qkv, const std::vector<float>& dout,
                         const std::vector<float>& out, const std::vector<float>& lse) {
  const int D = pr.D, T = pr.T, group = pr.H / pr.KVH;
  Backward bw{std::vector<float>(size_t(pr.B) * T * pr.row()), std::vector<float>(size_t(pr.B) * T * pr.row())};
  const float scale = pr.scale(), sl2 = scale * kLog2e;
  struct Pair {
    float p, ds;  // unrounded
  };
  // P and dS of query t of head h (sequence b) against `key`.
  auto p_ds = [&](int b, int h, int t, int key, const Range& r, float di) {
    if (!cuda::attn::sees(r, key)) return Pair{0.f, 0.f};
    const size_t qrow = (size_t(b) * T + t) * pr.row(), krow = (size_t(b) * T + key) * pr.row();
    const int g = h / group;
    const float* dO = &dout[(size_t(b) * T + t) * pr.orow() + size_t(h) * D];
    const float p = std::exp2(dot(&qkv[qrow + size_t(h) * D], &qkv[krow + size_t(pr.H + g) * D], D) * sl2 -
                              lse[(size_t(b) * pr.H + h) * T + t] * kLog2e);
    const float dp = dot(dO, &qkv[krow + size_t(pr.H + pr.KVH + g) * D], D);
    return Pair{p, p * (dp - di) * scale};
  };
  auto di_of = [&](int b, int h, int t) {
    const size_t o = (size_t(b) * T + t) * pr.orow() + size_t(h) * D;
    return dot(&dout[o], &out[o], D);
  };
  auto rnd = [&](float x) { return pr.round ? r16(x) : x; };
  parallel_for(pr.B * pr.H, [&](int bh) {  // dQ
    const int b = bh / pr.H, h = bh % pr.H, g = h / group;
    for (int q0 = 0; q0 < T; q0 += kTile) {
      const auto r = pr.ranges(b, q0);
      for (int i = 0; i < kTile && q0 + i < T; ++i) {
        float* dq = &bw.dqkv[(size_t(b) * T + q0 + i) * pr.row() + size_t(h) * D];
        float* bq = &bw.bound[(size_t(b) * T + q0 + i) * pr.row() + size_t(h) * D];
        const float di = di_of(b, h, q0 + i);
        for (int k0 = cuda::attn::key_tile_begin(min_first(r)); k0 < cuda::attn::key_tile_end(q0, T); k0 += kTile)
          for (int j = 0; j < kTile; ++j) {
            const Pair x = p_ds(b, h, q0 + i, k0 + j, r[size_t(i)], di);
            if (x.p == 0.f) continue;
            const float* k = &qkv[(size_t(b) * T + k0 + j) * pr.row() + size_t(pr.H + g) * D];
            for (int d = 0; d < D; ++d) dq[d] += rnd(x.ds) * k[d], bq[d] += std::fabs(x.ds * k[d]);
          }
      }
    }
  });
  parallel_for(pr.B * pr.KVH, [&](int bg) {  // dK, dV
    const int b = bg / pr.KVH, g = bg % pr.KVH;
    for (int k0 = 0; k0 < T; k0 += kTile)
      for (int h = g * group; h < (g + 1) * group; ++h)
        for (int t0 = k0; t0 < T; t0 += kTile) {
          const auto r = pr.ranges(b, t0);
          if (cuda::attn::query_tile_skipped(min_first(r), k0)) continue;
          for (int i = 0; i < kTile && t0 + i < T; ++i) {
            const float di = di_of(b, h, t0 + i);
            const float* q = &qkv[(size_t(b) * T + t0 + i) * pr.row() + size_t(h) * D];
            const float* dO = &dout[(size_t(b) * T + t0 + i) * pr.orow() + size_t(h) * D];
            for (int j = 0; j < kTile && k0 + j < T; ++j) {
              const Pair x = p_ds(b, h, t0 + i, k0 + j, r[size_t(i)], di);
              if (x.p == 0.f) continue;
              const size_t row = (size_t(b) * T + k0 + j) * pr.row();
              float *dk = &bw.dqkv[row + size_t(pr.H + g) * D], *dv = &bw.dqkv[row + size_t(pr.H + pr.KVH + g) * D];
              float *bk = &bw.bound[row + size_t(pr.H + g) * D], *bv = &bw.bound[row + size_t(pr.H + pr.KVH + g) * D];
              for (int d = 0; d < D; ++d) {
                dk[d] += rnd(x.ds) * q[d], bk[d] += std::fabs(x.ds * q[d]);
                dv[d] += rnd(x.p) * dO[d], bv[d] += x.p * std::fabs(dO[d]);
              }
            }
          }
        }
  });
  return bw;
}

}  // namespace mt::attn_emulation

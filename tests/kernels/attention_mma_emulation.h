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

// fp32 dot product in 8 interleaved partial sums (vectorisable; the tensor cores' order is
// another one again: summation order is not what the emulation pins down).
inline float dot(const float* a, const float* b, int D) {
  float acc[8] = {};
  int d = 0;
  for (; d + 8 <= D; d += 8)
    for (int k = 0; k < 8; ++k) acc[k] += a[d + k] * b[d + k];
  for (; d < D; ++d) acc[0] += a[d] * b[d];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
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

// fp32 view of one problem's tensors: row pointers into qkv [B*T, (H + 2 KVH) D] and [B*T, H D].
struct Tensors {
  const Problem& pr;
  const std::vector<float>& qkv;
  const float* q(int b, int t, int h) const { return &qkv[(size_t(b) * pr.T + t) * pr.row() + size_t(h) * pr.D]; }
  const float* k(int b, int t, int g) const { return q(b, t, pr.H + g); }
  const float* v(int b, int t, int g) const { return q(b, t, pr.H + pr.KVH + g); }
  size_t at(int b, int t, int head) const { return (size_t(b) * pr.T + t) * pr.row() + size_t(head) * pr.D; }
  size_t at_out(int b, int t, int h) const { return (size_t(b) * pr.T + t) * pr.orow() + size_t(h) * pr.D; }
};

struct Forward {
  std::vector<float> out, lse, bound;  // out before its bf16 rounding; lse natural log
};

// Row i of the forward block (b, h, q0): the online softmax over its key tiles.
inline void forward_row(const Tensors& x, int b, int h, int q0, int i, const std::vector<Range>& r, Forward& f) {
  const Problem& pr = x.pr;
  const int D = pr.D, g = h / (pr.H / pr.KVH), t = q0 + i;
  const float sl2 = pr.scale() * kLog2e;
  std::vector<float> s(kTile), o(static_cast<size_t>(D)), a(static_cast<size_t>(D));
  float m = -INFINITY, l = 0.f;
  for (int k0 = cuda::attn::key_tile_begin(min_first(r)); k0 < cuda::attn::key_tile_end(q0, pr.T); k0 += kTile) {
    float mx = -INFINITY, sum = 0.f;
    for (int j = 0; j < kTile; ++j) {
      s[size_t(j)] = cuda::attn::sees(r[size_t(i)], k0 + j) ? dot(x.q(b, t, h), x.k(b, k0 + j, g), D) * sl2 : -INFINITY;
      mx = std::max(mx, s[size_t(j)]);
    }
    const float m_new = std::max(m, mx), m_use = m_new == -INFINITY ? 0.f : m_new;
    const float factor = std::exp2(m - m_use);
    for (int d = 0; d < D; ++d) o[size_t(d)] *= factor, a[size_t(d)] *= factor;
    for (int j = 0; j < kTile; ++j) {
      const float p = std::exp2(s[size_t(j)] - m_use), p_op = pr.round ? r16(p) : p;
      if (p == 0.f) continue;
      sum += p;
      const float* v = x.v(b, k0 + j, g);
      for (int d = 0; d < D; ++d) o[size_t(d)] += p_op * v[d], a[size_t(d)] += p * std::fabs(v[d]);
    }
    l = l * factor + sum;
    m = m_new;
  }
  const size_t dst = x.at_out(b, t, h);
  for (int d = 0; d < D; ++d) f.out[dst + d] = o[size_t(d)] / l, f.bound[dst + d] = a[size_t(d)] / l;
  f.lse[(size_t(b) * pr.H + h) * pr.T + t] = (m + std::log2(l)) / kLog2e;
}

// The forward kernel's blocks (sequence, head, query tile), in parallel.
inline Forward forward(const Problem& pr, const std::vector<float>& qkv) {
  const size_t nout = size_t(pr.B) * pr.T * pr.orow();
  Forward f{std::vector<float>(nout), std::vector<float>(size_t(pr.B) * pr.H * pr.T), std::vector<float>(nout)};
  const Tensors x{pr, qkv};
  const int tiles = (pr.T + kTile - 1) / kTile;
  parallel_for(pr.B * pr.H * tiles, [&](int job) {
    const int b = job / (pr.H * tiles), h = job / tiles % pr.H, q0 = job % tiles * kTile;
    const auto r = pr.ranges(b, q0);
    for (int i = 0; i < kTile && q0 + i < pr.T; ++i) forward_row(x, b, h, q0, i, r, f);
  });
  return f;
}

struct Backward {
  std::vector<float> dqkv, bound;  // dqkv before its bf16 rounding
};

// P and dS (unrounded) of query t of head h, sequence b, against `key`, as the backward
// kernels recompute them from lse; di = dO_t . O_t.
struct Probabilities {
  const Tensors& x;
  const std::vector<float>&dout, &lse;
  float di(const std::vector<float>& out, int b, int t, int h) const {
    return dot(&dout[x.at_out(b, t, h)], &out[x.at_out(b, t, h)], x.pr.D);
  }
  void operator()(int b, int h, int t, int key, const Range& r, float di, float& p, float& ds) const {
    const Problem& pr = x.pr;
    const int g = h / (pr.H / pr.KVH);
    p = ds = 0.f;
    if (!cuda::attn::sees(r, key)) return;
    const float scale = pr.scale();
    p = std::exp2(dot(x.q(b, t, h), x.k(b, key, g), pr.D) * scale * kLog2e - lse[(size_t(b) * pr.H + h) * pr.T + t] * kLog2e);
    ds = p * (dot(&dout[x.at_out(b, t, h)], x.v(b, key, g), pr.D) - di) * scale;
  }
};

// acc[0:D] += op(w) * y, bound[0:D] += |w y|; op rounds w to bf16 when the problem says so.
inline void accumulate(const Problem& pr, float* acc, float* bound, float w, const float* y) {
  const float w_op = pr.round ? r16(w) : w;
  for (int d = 0; d < pr.D; ++d) acc[d] += w_op * y[d], bound[d] += std::fabs(w * y[d]);
}

// The backward kernels: dQ blocks (sequence, head, query tile), then dK / dV blocks (sequence,
// kv head, key tile), each in parallel. `out` is the output the forward stored (bf16 values),
// `lse` its lse.
inline Backward backward(const Problem& pr, const std::vector<float>& qkv, const std::vector<float>& dout,
                         const std::vector<float>& out, const std::vector<float>& lse) {
  const int T = pr.T, group = pr.H / pr.KVH, tiles = (T + kTile - 1) / kTile;
  Backward bw{std::vector<float>(size_t(pr.B) * T * pr.row()), std::vector<float>(size_t(pr.B) * T * pr.row())};
  const Tensors x{pr, qkv};
  const Probabilities pds{x, dout, lse};
  parallel_for(pr.B * pr.H * tiles, [&](int job) {  // dQ += dS K
    const int b = job / (pr.H * tiles), h = job / tiles % pr.H, q0 = job % tiles * kTile;
    const auto r = pr.ranges(b, q0);
    for (int i = 0; i < kTile && q0 + i < T; ++i) {
      const size_t dst = x.at(b, q0 + i, h);
      const float di = pds.di(out, b, q0 + i, h);
      for (int k0 = cuda::attn::key_tile_begin(min_first(r)); k0 < cuda::attn::key_tile_end(q0, T); k0 += kTile)
        for (int j = 0; j < kTile; ++j) {
          float p, ds;
          pds(b, h, q0 + i, k0 + j, r[size_t(i)], di, p, ds);
          if (p != 0.f) accumulate(pr, &bw.dqkv[dst], &bw.bound[dst], ds, x.k(b, k0 + j, h / group));
        }
    }
  });
  parallel_for(pr.B * pr.KVH * tiles, [&](int job) {  // dK += dS^T Q, dV += P^T dO
    const int b = job / (pr.KVH * tiles), g = job / tiles % pr.KVH, k0 = job % tiles * kTile;
    for (int h = g * group; h < (g + 1) * group; ++h)
      for (int t0 = k0; t0 < T; t0 += kTile) {
        const auto r = pr.ranges(b, t0);
        if (cuda::attn::query_tile_skipped(min_first(r), k0)) continue;
        for (int i = 0; i < kTile && t0 + i < T; ++i) {
          const float di = pds.di(out, b, t0 + i, h);
          for (int j = 0; j < kTile && k0 + j < T; ++j) {
            float p, ds;
            pds(b, h, t0 + i, k0 + j, r[size_t(i)], di, p, ds);
            if (p == 0.f) continue;
            const size_t dk = x.at(b, k0 + j, pr.H + g), dv = x.at(b, k0 + j, pr.H + pr.KVH + g);
            accumulate(pr, &bw.dqkv[dk], &bw.bound[dk], ds, x.q(b, t0 + i, h));
            accumulate(pr, &bw.dqkv[dv], &bw.bound[dv], p, &dout[x.at_out(b, t0 + i, h)]);
          }
        }
      }
  });
  return bw;
}

}  // namespace mt::attn_emulation

// Causal grouped-query attention, flash-attention style (online softmax over 64 x 64 tiles).
// Tiles are copied into small zero-padded buffers and multiplied with a register-tiled
// micro-kernel; no T x T matrix exists. Forward is parallel over (b, h); backward over
// (b, kv head), so each thread owns dK/dV of its kv head and dQ of the heads in its group.
// Every output is produced by one thread in a fixed order: results are bit-reproducible.
// Packed documents (pos != nullptr): query t sees keys [t - pos[t], t]; a sliding window
// narrows that to its last `window` keys. Key tiles no query of a tile sees are skipped, so cost
// falls with the documents' lengths and the window.
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/common.h"

namespace mt::cpu {
namespace {

constexpr int kTile = 64;  // queries per block == keys per block (aligned, so causal is simple)
using detail::kMR;
using detail::kNR;

// C[M][N] (+)= A[M][K] @ B[K][N]; M a multiple of kMR, N a multiple of kNR<T>.
template <bool kAccumulate, typename T>
void tile_mm(const T* A, int lda, const T* B, int ldb, int K, T* C, int ldc, int M, int N) {
  for (int i = 0; i < M; i += kMR)
    for (int j = 0; j < N; j += kNR<T>)
      detail::micro_tile<kAccumulate>(A + i * lda, lda, B + j, ldb, K, C + i * ldc + j, ldc);
}

// Geometry of one sequence's head views inside the fused qkv rows.
struct Geometry {
  int T, H, KVH, D, Dp;
  long row;  // elements per qkv row
  long q_off(int h) const { return long(h) * D; }
  long k_off(int g) const { return long(H + g) * D; }
  long v_off(int g) const { return long(H + KVH + g) * D; }
};

// dst[i][0:Dp] = src row (t0 + i), zero-padded to kTile rows and Dp columns.
template <typename T>
void load_rows(T* dst, const T* src, long stride, int t0, int n, int D, int Dp) {
  for (int i = 0; i < kTile; ++i) {
    T* d = dst + i * Dp;
    if (i < n) {
      const T* s = src + long(t0 + i) * stride;
      std::copy(s, s + D, d);
      std::fill(d + D, d + Dp, T(0));
    } else {
      std::fill(d, d + Dp, T(0));
    }
  }
}

// dst[d][i] = src row (t0 + i)[d], i.e. the transposed tile [Dp][kTile], zero-padded.
template <typename T>
void load_cols(T* dst, const T* src, long stride, int t0, int n, int D, int Dp) {
  std::fill(dst, dst + Dp * kTile, T(0));
  for (int i = 0; i < n; ++i) {
    const T* s = src + long(t0 + i) * stride;
    for (int d = 0; d < D; ++d) dst[d * kTile + i] = s[d];
  }
}

// Number of keys k0 + j (j < kn) visible to query q (causal), clamped to [0, kn].
inline int visible(int q, int k0, int kn) { return std::clamp(q - k0 + 1, 0, kn); }

// Which keys a query sees beyond causality: its document's (pos, nullptr = the whole row) and,
// with a sliding window, only the last `window` of those.
struct Sight {
  const int32_t* pos;
  int window;
  // First key query t may see.
  int first(int t) const {
    const int doc = pos ? std::clamp(t - pos[t], 0, t) : 0;
    return window > 0 ? std::max(doc, t - window + 1) : doc;
  }
  // Smallest first key among queries [q0, q0 + qn): keys before it are seen by none.
  int tile_start(int q0, int qn) const {
    int lo = q0;
    for (int i = 0; i < qn; ++i) lo = std::min(lo, first(q0 + i));
    return lo;
  }
};

// Keys k0 + j with lo <= j < hi are visible to query q.
struct Window {
  int lo, hi;
};
inline Window window(const Sight& v, int q, int k0, int kn) {
  return {std::clamp(v.first(q) - k0, 0, kn), visible(q, k0, kn)};
}

template <typename T>
T score_scale(const AttentionOptions& o, int D) {
  return o.scale > 0 ? T(o.scale) : T(1) / std::sqrt(T(D));
}

template <typename T>
struct FwdBuffers {
  std::vector<T> q, kt, v, s, o, m, l;
  explicit FwdBuffers(int Dp)
      : q(kTile * Dp), kt(Dp * kTile), v(kTile * Dp), s(kTile * kTile), o(kTile * Dp),
        m(kTile), l(kTile) {}
};

// Online-softmax update of rows [0, qn) with the raw scores in f.s; leaves P in f.s.
// A row that sees no key of this tile (another document) is left unchanged.
// s -> cap * tanh(s / cap) (Gemma 2), on a tile row.
template <typename T>
void soft_cap(T* s, int n, T cap) {
  for (int j = 0; j < n; ++j) s[j] = cap * detail::fast_tanh(s[j] / cap);
}

template <typename T>
void softmax_update(FwdBuffers<T>& f, const Sight& v, int q0, int qn, int k0, int kn, int Dp, T scale, T cap) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  for (int i = 0; i < kTile; ++i) {
    T* s = f.s.data() + i * kTile;
    const Window w = i < qn ? window(v, q0 + i, k0, kn) : Window{0, 0};
    if (w.hi <= w.lo) {
      std::fill(s, s + kTile, T(0));
      continue;
    }
    for (int j = 0; j < kTile; ++j) s[j] *= scale;
    if (cap > 0) soft_cap(s, kTile, cap);
    for (int j = 0; j < kTile; ++j) s[j] = j >= w.lo && j < w.hi ? s[j] : neg_inf;  // causal / document mask
    T mx = f.m[i];
    for (int j = 0; j < kTile; ++j) mx = std::max(mx, s[j]);
    const T alpha = detail::fast_exp(f.m[i] - mx);
    T sum = 0;
    detail::exp_shifted(s, kTile, mx);
    for (int j = 0; j < kTile; ++j) sum += s[j];
    f.l[i] = f.l[i] * alpha + sum;
    f.m[i] = mx;
    T* o = f.o.data() + i * Dp;
    for (int d = 0; d < Dp; ++d) o[d] *= alpha;
  }
}

template <typename T>
void forward_head(T* out, T* lse, const T* qkv, const int32_t* pos, const AttentionOptions& opt, const Geometry& g,
                  int b, int h, FwdBuffers<T>& f) {
  const int kvh = h / (g.H / g.KVH), D = g.D, Dp = g.Dp;
  const T scale = score_scale<T>(opt, D);
  const T* base = qkv + long(b) * g.T * g.row;
  const long out_row = long(g.H) * D;
  const Sight sight{pos ? pos + long(b) * g.T : nullptr, opt.window};
  for (int q0 = 0; q0 < g.T; q0 += kTile) {
    const int qn = std::min(kTile, g.T - q0);
    load_rows(f.q.data(), base + g.q_off(h), g.row, q0, qn, D, Dp);
    std::fill(f.o.begin(), f.o.end(), T(0));
    std::fill(f.m.begin(), f.m.end(), -std::numeric_limits<T>::infinity());
    std::fill(f.l.begin(), f.l.end(), T(0));
    for (int k0 = sight.tile_start(q0, qn) / kTile * kTile; k0 < q0 + qn; k0 += kTile) {
      const int kn = std::min(kTile, g.T - k0);
      load_cols(f.kt.data(), base + g.k_off(kvh), g.row, k0, kn, D, Dp);
      load_rows(f.v.data(), base + g.v_off(kvh), g.row, k0, kn, D, Dp);
      tile_mm<false>(f.q.data(), Dp, f.kt.data(), kTile, Dp, f.s.data(), kTile, kTile, kTile);
      softmax_update(f, sight, q0, qn, k0, kn, Dp, scale, T(opt.softcap));
      tile_mm<true>(f.s.data(), kTile, f.v.data(), Dp, kTile, f.o.data(), Dp, kTile, Dp);
    }
    for (int i = 0; i < qn; ++i) {
      const int t = q0 + i;
      T* dst = out + (long(b) * g.T + t) * out_row + long(h) * D;
      const T inv = T(1) / f.l[i];
      for (int d = 0; d < D; ++d) dst[d] = f.o[i * Dp + d] * inv;
      lse[(long(b) * g.H + h) * g.T + t] = f.m[i] + std::log(f.l[i]);
    }
  }
}

template <typename T>
Geometry make_geometry(int T_, int H, int KVH, int D) {
  const int Dp = (D + kNR<T> - 1) / kNR<T> * kNR<T>;
  return Geometry{T_, H, KVH, D, Dp, long(H + 2 * KVH) * D};
}

// Per-thread buffers of the backward: whole-sequence dQ/dK/dV accumulators of one kv group
// ([Tp][Dp]) plus one tile of each operand.
template <typename T>
struct BwdBuffers {
  std::vector<T> dq, dk, dv, di;
  std::vector<T> q, dout, k, kt, vt, p, pt, ds, dst;
  BwdBuffers(int Tp, int Dp)
      : dq(size_t(Tp) * Dp), dk(size_t(Tp) * Dp), dv(size_t(Tp) * Dp), di(Tp), q(kTile * Dp),
        dout(kTile * Dp), k(kTile * Dp), kt(Dp * kTile), vt(Dp * kTile), p(kTile * kTile),
        pt(kTile * kTile), ds(kTile * kTile), dst(kTile * kTile) {}
};

// P = exp(z - lse), z = scale * S (soft-capped: cap * tanh(scale * S / cap)), on visible
// entries (0 elsewhere); dS = scale * P * (dP - D_i) (times dz/d(scale S) = 1 - (z / cap)^2 when
// capped). f.p holds S on entry and P on exit; f.ds holds dP on entry and dS on exit. Also
// transposes (f.dst holds the cap's derivative in between).
template <typename T>
void probs_and_dscores(BwdBuffers<T>& f, const T* lse, const Sight& v, int q0, int qn, int k0, int kn,
                       T scale, T cap) {
  for (int i = 0; i < kTile; ++i) {
    T* p = f.p.data() + i * kTile;
    T* ds = f.ds.data() + i * kTile;
    const Window w = i < qn ? window(v, q0 + i, k0, kn) : Window{0, 0};
    const T l = i < qn ? lse[q0 + i] : T(0);
    const T di = f.di[q0 + i];
    for (int j = 0; j < kTile; ++j) p[j] *= scale;
    T* slope = f.dst.data() + i * kTile;
    if (cap > 0) {
      soft_cap(p, kTile, cap);
      for (int j = 0; j < kTile; ++j) slope[j] = T(1) - (p[j] / cap) * (p[j] / cap);
    }
    detail::exp_shifted(p, kTile, l);
    for (int j = 0; j < kTile; ++j) p[j] = j >= w.lo && j < w.hi ? p[j] : T(0);  // causal / document mask
    for (int j = 0; j < kTile; ++j) ds[j] = scale * p[j] * (ds[j] - di);
    if (cap > 0)
      for (int j = 0; j < kTile; ++j) ds[j] *= slope[j];
  }
  for (int i = 0; i < kTile; ++i)
    for (int j = 0; j < kTile; ++j) {
      f.pt[j * kTile + i] = f.p[i * kTile + j];
      f.dst[j * kTile + i] = f.ds[i * kTile + j];
    }
}

// Accumulates into f.dq (zeroed here) and f.dk/f.dv the gradients from query head h.
template <typename T>
void backward_head(const T* dout, const T* qkv, const T* out, const T* lse, const int32_t* pos,
                   const AttentionOptions& opt, const Geometry& g, int b, int h, int kvh, BwdBuffers<T>& f) {
  const int D = g.D, Dp = g.Dp;
  const T scale = score_scale<T>(opt, D);
  const T* base = qkv + long(b) * g.T * g.row;
  const long orow = long(g.H) * D;
  const T* dob = dout + long(b) * g.T * orow + long(h) * D;
  const T* ob = out + long(b) * g.T * orow + long(h) * D;
  const T* lse_h = lse + (long(b) * g.H + h) * g.T;
  const Sight sight{pos ? pos + long(b) * g.T : nullptr, opt.window};
  std::fill(f.dq.begin(), f.dq.end(), T(0));
  std::fill(f.di.begin(), f.di.end(), T(0));
  for (int t = 0; t < g.T; ++t) {  // D_t = dO_t . O_t
    T acc = 0;
    for (int d = 0; d < D; ++d) acc += dob[t * orow + d] * ob[t * orow + d];
    f.di[t] = acc;
  }
  for (int k0 = 0; k0 < g.T; k0 += kTile) {
    const int kn = std::min(kTile, g.T - k0);
    load_rows(f.k.data(), base + g.k_off(kvh), g.row, k0, kn, D, Dp);
    load_cols(f.kt.data(), base + g.k_off(kvh), g.row, k0, kn, D, Dp);
    load_cols(f.vt.data(), base + g.v_off(kvh), g.row, k0, kn, D, Dp);
    for (int q0 = k0; q0 < g.T; q0 += kTile) {
      const int qn = std::min(kTile, g.T - q0);
      if (sight.tile_start(q0, qn) >= k0 + kn) continue;  // no query here sees these keys
      load_rows(f.q.data(), base + g.q_off(h), g.row, q0, qn, D, Dp);
      load_rows(f.dout.data(), dob, orow, q0, qn, D, Dp);
      tile_mm<false>(f.q.data(), Dp, f.kt.data(), kTile, Dp, f.p.data(), kTile, kTile, kTile);
      tile_mm<false>(f.dout.data(), Dp, f.vt.data(), kTile, Dp, f.ds.data(), kTile, kTile,
                     kTile);
      probs_and_dscores(f, lse_h, sight, q0, qn, k0, kn, scale, T(opt.softcap));
      T* dv = f.dv.data() + long(k0) * Dp;
      T* dk = f.dk.data() + long(k0) * Dp;
      tile_mm<true>(f.pt.data(), kTile, f.dout.data(), Dp, kTile, dv, Dp, kTile, Dp);
      tile_mm<true>(f.dst.data(), kTile, f.q.data(), Dp, kTile, dk, Dp, kTile, Dp);
      tile_mm<true>(f.ds.data(), kTile, f.k.data(), Dp, kTile, f.dq.data() + long(q0) * Dp, Dp,
                    kTile, Dp);
    }
  }
}

// dst rows (stride `row`) = the first D columns of the [T][Dp] accumulator.
template <typename T>
void store_rows(T* dst, long row, const std::vector<T>& acc, int T_, int D, int Dp) {
  for (int t = 0; t < T_; ++t) std::copy_n(acc.data() + long(t) * Dp, D, dst + long(t) * row);
}

}  // namespace

template <typename T>
void attention_forward(T* out, T* lse, const T* qkv, const int32_t* pos, int B, int T_, int H, int KVH,
                       int D, AttentionOptions opt) {
  const Geometry g = make_geometry<T>(T_, H, KVH, D);
  const int tasks = B * H;
  MT_OMP(parallel if (detail::worth_parallel(long(tasks) * T_ * T_ * D / 2)))
  {
    FwdBuffers<T> f(g.Dp);
    MT_OMP(for schedule(static))
    for (int task = 0; task < tasks; ++task) forward_head(out, lse, qkv, pos, opt, g, task / H, task % H, f);
  }
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse,
                        const int32_t* pos, int B, int T_, int H, int KVH, int D, AttentionOptions opt) {
  const Geometry g = make_geometry<T>(T_, H, KVH, D);
  const int group = H / KVH, tasks = B * KVH;
  const int Tp = (T_ + kTile - 1) / kTile * kTile;
  MT_OMP(parallel if (detail::worth_parallel(long(B) * H * T_ * T_ * D)))
  {
    BwdBuffers<T> f(Tp, g.Dp);
    MT_OMP(for schedule(static))
    for (int task = 0; task < tasks; ++task) {
      const int b = task / KVH, kvh = task % KVH;
      T* base = dqkv + long(b) * T_ * g.row;
      std::fill(f.dk.begin(), f.dk.end(), T(0));
      std::fill(f.dv.begin(), f.dv.end(), T(0));
      for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
        backward_head(dout, qkv, out, lse, pos, opt, g, b, h, kvh, f);
        store_rows(base + g.q_off(h), g.row, f.dq, T_, D, g.Dp);
      }
      store_rows(base + g.k_off(kvh), g.row, f.dk, T_, D, g.Dp);
      store_rows(base + g.v_off(kvh), g.row, f.dv, T_, D, g.Dp);
    }
  }
}

#define MT_INSTANTIATE(T)                                                                  \
  template void attention_forward<T>(T*, T*, const T*, const int32_t*, int, int, int, int, int, \
                                     AttentionOptions);                                           \
  template void attention_backward<T>(T*, const T*, const T*, const T*, const T*, const int32_t*, \
                                      int, int, int, int, int, AttentionOptions);
MT_INSTANTIATE(float)
MT_INSTANTIATE(double)
#undef MT_INSTANTIATE

}  // namespace mt::cpu

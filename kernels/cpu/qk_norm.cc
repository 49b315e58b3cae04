// Q/K normalisation: the vectors of a row are RMSNorm rows (kernels/cpu/rmsnorm.cc's math);
// rows in parallel, weight gradients summed over rows in row order per column, so results do
// not depend on the thread count.
#include "kernels/qk_norm.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/common.h"
#include "kernels/rmsnorm.h"

namespace mt::cpu {
namespace {

// Vector j of a row: its offset in the row, width and weight (q's vectors first, then k's).
template <typename T>
struct Vec {
  long off;
  int width;
  const T* w;
};
template <typename T>
Vec<T> vec(const QkNormShape& s, int j, const T* wq, const T* wk) {
  if (j < s.q_vectors()) return {long(j) * s.q_width(), s.q_width(), wq};
  const int i = j - s.q_vectors();
  return {long(s.H) * s.D + long(i) * s.k_width(), s.k_width(), wk};
}

}  // namespace

// Each vector is one RMSNorm row (kernels/cpu/rmsnorm.cc: the same formula, so a q/k norm is
// bit-identical to rmsnorm_forward on that vector alone).
template <typename T>
void qk_norm_forward(T* qkv, T* rstd, const T* raw, const T* wq, const T* wk, const QkNormShape& s, float eps,
                     float offset) {
  const long row = s.row(), kv = long(s.KVH) * s.D, v0 = row - kv;
  MT_OMP(parallel for schedule(static) if (detail::worth_parallel(long(s.N) * row)))
  for (int n = 0; n < s.N; ++n) {
    for (int j = 0; j < s.vectors(); ++j) {
      const Vec<T> v = vec(s, j, wq, wk);
      rmsnorm_forward(qkv + n * row + v.off, rstd + long(n) * s.vectors() + j, raw + n * row + v.off, v.w, 1, v.width,
                      eps, offset);
    }
    std::copy_n(raw + n * row + v0, kv, qkv + n * row + v0);
  }
}

template <typename T>
void qk_norm_backward(T* draw, T* dwq, T* dwk, const T* dqkv, const T* raw, const T* wq, const T* wk, const T* rstd,
                      const QkNormShape& s, float offset) {
  const long row = s.row(), kv = long(s.KVH) * s.D, v0 = row - kv;
  MT_OMP(parallel for schedule(static) if (detail::worth_parallel(long(s.N) * row)))
  for (int n = 0; n < s.N; ++n) {
    for (int j = 0; j < s.vectors(); ++j) {
      const Vec<T> v = vec(s, j, wq, wk);
      T* dx = draw + n * row + v.off;
      std::fill(dx, dx + v.width, T(0));  // rmsnorm_backward accumulates; draw is overwritten
      rmsnorm_backward(dx, static_cast<T*>(nullptr), dqkv + n * row + v.off, raw + n * row + v.off, v.w,
                       rstd + long(n) * s.vectors() + j, 1, v.width, offset);
    }
    std::copy_n(dqkv + n * row + v0, kv, draw + n * row + v0);
  }
  // dw[c] += sum over rows, then over the row's vectors of that weight, of dy * x * rstd: in
  // that order for every column, the columns in chunks of one cache line so the rows are read
  // in order (a column at a time read every row's line once a column: 4x this backward's time).
  constexpr int kCols = 16;
  for (const bool q : {true, false}) {
    T* dw = q ? dwq : dwk;
    if (!dw) continue;
    const int first = q ? 0 : s.q_vectors(), count = q ? s.q_vectors() : s.k_vectors();
    const int width = q ? s.q_width() : s.k_width();
    MT_OMP(parallel for schedule(static) if (detail::worth_parallel(long(s.N) * row)))
    for (int c0 = 0; c0 < width; c0 += kCols) {
      const int cols = std::min(kCols, width - c0);
      T acc[kCols] = {};
      for (int n = 0; n < s.N; ++n)
        for (int j = first; j < first + count; ++j) {
          const long at = n * row + vec(s, j, wq, wk).off + c0;
          const T r = rstd[long(n) * s.vectors() + j];
          for (int c = 0; c < cols; ++c) acc[c] += dqkv[at + c] * raw[at + c] * r;
        }
      for (int c = 0; c < cols; ++c) dw[c0 + c] += acc[c];
    }
  }
}

#define MT_INSTANTIATE(T)                                                                                 \
  template void qk_norm_forward<T>(T*, T*, const T*, const T*, const T*, const QkNormShape&, float, float); \
  template void qk_norm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*,          \
                                    const QkNormShape&, float);
MT_INSTANTIATE(float)
MT_INSTANTIATE(double)
#undef MT_INSTANTIATE

}  // namespace mt::cpu

// Q/K normalisation: the vectors of a row are RMSNorm rows (kernels/cpu/rmsnorm.cc's math);
// rows in parallel, weight gradients summed over rows in row order per column, so results do
// not depend on the thread count.
#include "kernels/qk_norm.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/common.h"

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

template <typename T>
void qk_norm_forward(T* qkv, T* rstd, const T* raw, const T* wq, const T* wk, const QkNormShape& s, float eps,
                     float offset) {
  const T off = T(offset);
  const long row = s.row(), kv = long(s.KVH) * s.D, v0 = row - kv;
  MT_OMP(parallel for schedule(static) if (detail::worth_parallel(long(s.N) * row)))
  for (int n = 0; n < s.N; ++n) {
    for (int j = 0; j < s.vectors(); ++j) {
      const Vec<T> v = vec(s, j, wq, wk);
      const T* x = raw + n * row + v.off;
      T* y = qkv + n * row + v.off;
      double ss = 0;
      for (int c = 0; c < v.width; ++c) ss += double(x[c]) * double(x[c]);
      const T r = T(1.0 / std::sqrt(ss / v.width + double(eps)));
      rstd[long(n) * s.vectors() + j] = r;
      for (int c = 0; c < v.width; ++c) y[c] = x[c] * r * (v.w[c] + off);
    }
    std::copy_n(raw + n * row + v0, kv, qkv + n * row + v0);
  }
}

template <typename T>
void qk_norm_backward(T* draw, T* dwq, T* dwk, const T* dqkv, const T* raw, const T* wq, const T* wk, const T* rstd,
                      const QkNormShape& s, float offset) {
  const T off = T(offset);
  const long row = s.row(), kv = long(s.KVH) * s.D, v0 = row - kv;
  MT_OMP(parallel for schedule(static) if (detail::worth_parallel(long(s.N) * row)))
  for (int n = 0; n < s.N; ++n) {
    for (int j = 0; j < s.vectors(); ++j) {
      const Vec<T> v = vec(s, j, wq, wk);
      const T* x = raw + n * row + v.off;
      const T* dy = dqkv + n * row + v.off;
      T* dx = draw + n * row + v.off;
      const T r = rstd[long(n) * s.vectors() + j];
      double dot = 0;
      for (int c = 0; c < v.width; ++c) dot += double(dy[c]) * double(v.w[c] + off) * double(x[c]);
      const T k = T(dot * double(r) * double(r) * double(r) / v.width);
      for (int c = 0; c < v.width; ++c) dx[c] = dy[c] * (v.w[c] + off) * r - k * x[c];
    }
    std::copy_n(dqkv + n * row + v0, kv, draw + n * row + v0);
  }
  // dw[c] += sum over rows, then over the row's vectors of that weight, of dy * x * rstd
  for (const bool q : {true, false}) {
    T* dw = q ? dwq : dwk;
    if (!dw) continue;
    const int first = q ? 0 : s.q_vectors(), count = q ? s.q_vectors() : s.k_vectors();
    const int width = q ? s.q_width() : s.k_width();
    MT_OMP(parallel for schedule(static) if (detail::worth_parallel(long(s.N) * row)))
    for (int c = 0; c < width; ++c) {
      T acc = 0;
      for (int n = 0; n < s.N; ++n)
        for (int j = first; j < first + count; ++j) {
          const long at = n * row + vec(s, j, wq, wk).off + c;
          acc += dqkv[at] * raw[at] * rstd[long(n) * s.vectors() + j];
        }
      dw[c] += acc;
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

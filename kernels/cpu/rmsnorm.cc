// RMSNorm forward/backward. Rows are independent (parallel over rows); dweight is summed over
// rows in row order per column chunk, so results do not depend on the thread count.
#include "kernels/rmsnorm.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/common.h"

namespace mt::cpu {

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int N, int C, float eps, float offset) {
  const T off = T(offset);
  MT_OMP(parallel for schedule(static) if (detail::worth_parallel(long(N) * C)))
  for (int n = 0; n < N; ++n) {
    const T* x = inp + long(n) * C;
    T* y = out + long(n) * C;
    double ss = 0;
    for (int c = 0; c < C; ++c) ss += double(x[c]) * double(x[c]);
    const T r = T(1.0 / std::sqrt(ss / C + double(eps)));
    rstd[n] = r;
    for (int c = 0; c < C; ++c) y[c] = x[c] * r * (weight[c] + off);
  }
}

template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                      const T* rstd, int N, int C, float offset) {
  const T off = T(offset);
  if (dinp != nullptr) {
    MT_OMP(parallel for schedule(static) if (detail::worth_parallel(long(N) * C)))
    for (int n = 0; n < N; ++n) {
      const T* x = inp + long(n) * C;
      const T* dy = dout + long(n) * C;
      T* dx = dinp + long(n) * C;
      const T r = rstd[n];
      double dot = 0;  // sum_c dy * w * x
      for (int c = 0; c < C; ++c) dot += double(dy[c]) * double(weight[c] + off) * double(x[c]);
      const T k = T(dot * double(r) * double(r) * double(r) / C);
      for (int c = 0; c < C; ++c) dx[c] += dy[c] * (weight[c] + off) * r - k * x[c];
    }
  }
  if (dweight == nullptr) return;
  constexpr int kCols = 64;
  const int chunks = (C + kCols - 1) / kCols;
  MT_OMP(parallel for schedule(static) if (detail::worth_parallel(long(N) * C)))
  for (int ch = 0; ch < chunks; ++ch) {
    const int c0 = ch * kCols, c1 = std::min(C, c0 + kCols);
    T acc[kCols] = {};
    for (int n = 0; n < N; ++n) {
      const T* x = inp + long(n) * C;
      const T* dy = dout + long(n) * C;
      const T r = rstd[n];
      for (int c = c0; c < c1; ++c) acc[c - c0] += dy[c] * x[c] * r;
    }
    for (int c = c0; c < c1; ++c) dweight[c] += acc[c - c0];
  }
}

#define MT_INSTANTIATE(T)                                                               \
  template void rmsnorm_forward<T>(T*, T*, const T*, const T*, int, int, float, float); \
  template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int, \
                                    int, float);
MT_INSTANTIATE(float)
MT_INSTANTIATE(double)
#undef MT_INSTANTIATE

}  // namespace mt::cpu

// SwiGLU: out = silu(gate) * up, gu rows [gate (F) | up (F)]. Elementwise, parallel over rows.
#include "kernels/swiglu.h"

#include <cmath>

#include "kernels/cpu/common.h"

namespace mt::cpu {

template <typename T>
void swiglu_forward(T* out, const T* gu, int N, int F) {
  MT_OMP(parallel for schedule(static) if (detail::worth_parallel(long(N) * F)))
  for (int n = 0; n < N; ++n) {
    const T* g = gu + long(n) * 2 * F;
    const T* u = g + F;
    T* y = out + long(n) * F;
    for (int f = 0; f < F; ++f) {
      const T s = T(1) / (T(1) + detail::fast_exp(-g[f]));
      y[f] = g[f] * s * u[f];
    }
  }
}

template <typename T>
void swiglu_backward(T* dgu, const T* dout, const T* gu, int N, int F) {
  MT_OMP(parallel for schedule(static) if (detail::worth_parallel(long(N) * F)))
  for (int n = 0; n < N; ++n) {
    const T* g = gu + long(n) * 2 * F;
    const T* u = g + F;
    const T* dy = dout + long(n) * F;
    T* dg = dgu + long(n) * 2 * F;
    T* du = dg + F;
    for (int f = 0; f < F; ++f) {
      const T s = T(1) / (T(1) + detail::fast_exp(-g[f]));
      const T silu = g[f] * s;
      dg[f] = dy[f] * u[f] * (s + silu * (T(1) - s));
      du[f] = dy[f] * silu;
    }
  }
}

#define MT_INSTANTIATE(T)                                   \
  template void swiglu_forward<T>(T*, const T*, int, int); \
  template void swiglu_backward<T>(T*, const T*, const T*, int, int);
MT_INSTANTIATE(float)
MT_INSTANTIATE(double)
#undef MT_INSTANTIATE

}  // namespace mt::cpu

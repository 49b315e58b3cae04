// Attention sinks (kernels/attention.h): a per-head logit folded into the attention's
// log-sum-exp after the fact, and its gradient.
#include <algorithm>
#include <cmath>

#include "kernels/attention.h"

namespace mt::cpu {

template <typename T>
void attention_sinks_forward(T* out, T* lse, const T* sinks, int B, int T_, int H, int D) {
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < T_; ++t) {
        T& l = lse[(size_t(b) * H + h) * T_ + t];
        const T m = std::max(l, sinks[h]);
        const T folded = m + std::log(std::exp(l - m) + std::exp(sinks[h] - m));
        const T scale = std::exp(l - folded);
        T* o = out + (size_t(b) * T_ + t) * size_t(H) * D + size_t(h) * D;
        for (int d = 0; d < D; ++d) o[d] *= scale;
        l = folded;
      }
}

template <typename T>
void attention_sinks_backward(T* dsinks, const T* dout, const T* out, const T* lse, const T* sinks, int B, int T_,
                              int H, int D) {
  for (int h = 0; h < H; ++h) {
    T sum = 0;
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T_; ++t) {
        const size_t row = (size_t(b) * T_ + t) * size_t(H) * D + size_t(h) * D;
        T dot = 0;
        for (int d = 0; d < D; ++d) dot += dout[row + d] * out[row + d];
        sum += std::exp(sinks[h] - lse[(size_t(b) * H + h) * T_ + t]) * dot;
      }
    dsinks[h] -= sum;
  }
}

#define MT_INSTANTIATE(T)                                                                     \
  template void attention_sinks_forward<T>(T*, T*, const T*, int, int, int, int);            \
  template void attention_sinks_backward<T>(T*, const T*, const T*, const T*, const T*, int, int, int, int);
MT_INSTANTIATE(float)
MT_INSTANTIATE(double)
#undef MT_INSTANTIATE

}  // namespace mt::cpu

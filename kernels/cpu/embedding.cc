// Token embedding. Backward is parallel over channel ranges with tokens summed in order, so
// repeated tokens accumulate deterministically.
#include "kernels/embedding.h"

#include <algorithm>

#include "kernels/cpu/common.h"

namespace mt::cpu {

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, int N, int C) {
  MT_OMP(parallel for schedule(static) if (detail::worth_parallel(long(N) * C)))
  for (int n = 0; n < N; ++n) {
    const T* src = wte + long(tokens[n]) * C;
    std::copy(src, src + C, out + long(n) * C);
  }
}

template <typename T>
void embedding_backward(T* dwte, const T* dout, const int32_t* tokens, int N, int C) {
  constexpr int kCols = 64;
  const int chunks = (C + kCols - 1) / kCols;
  MT_OMP(parallel for schedule(static) if (detail::worth_parallel(long(N) * C)))
  for (int ch = 0; ch < chunks; ++ch) {
    const int c0 = ch * kCols, c1 = std::min(C, c0 + kCols);
    for (int n = 0; n < N; ++n) {
      T* dst = dwte + long(tokens[n]) * C;
      const T* src = dout + long(n) * C;
      for (int c = c0; c < c1; ++c) dst[c] += src[c];
    }
  }
}

#define MT_INSTANTIATE(T)                                                         \
  template void embedding_forward<T>(T*, const int32_t*, const T*, int, int); \
  template void embedding_backward<T>(T*, const T*, const int32_t*, int, int);
MT_INSTANTIATE(float)
MT_INSTANTIATE(double)
#undef MT_INSTANTIATE

}  // namespace mt::cpu

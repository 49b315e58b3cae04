// Rotary position embedding (HF rotate-half), in place on the q and k parts of a qkv buffer.
// Angles are computed in double and rounded to T; backward rotates by the negative angle.
#include "kernels/rope.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/common.h"

namespace mt::cpu {
namespace {

// Rotates every q and k head of one token row by angle pos * inv_freq[i] (sign = +1 or -1).
template <typename T>
void rotate_row(T* row, const T* cs, const T* sn, int heads, int D, T sign) {
  const int half = D / 2;
  for (int h = 0; h < heads; ++h) {
    T* x = row + long(h) * D;
    for (int i = 0; i < half; ++i) {
      const T x1 = x[i], x2 = x[i + half];
      const T s = sign * sn[i];
      x[i] = x1 * cs[i] - x2 * s;
      x[i + half] = x2 * cs[i] + x1 * s;
    }
  }
}

// cos and sin of position p times `scale`, in double, rounded to T once.
template <typename T>
void angles(T* cs, T* sn, const float* inv_freq, long p, int half, double scale) {
  for (int i = 0; i < half; ++i) {
    const double angle = double(p) * double(inv_freq[i]);
    cs[i] = T(std::cos(angle) * scale);
    sn[i] = T(std::sin(angle) * scale);
  }
}

template <typename T>
void rope_apply(T* qkv, const float* inv_freq, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                T sign, float scale) {
  const int half = D / 2;
  const long row_len = long(H + 2 * KVH) * D;
  MT_OMP(parallel if (detail::worth_parallel(long(B) * T_ * (H + KVH) * D)))
  {
    std::vector<T> cs(half), sn(half);
    MT_OMP(for schedule(static))
    for (int t = 0; t < T_; ++t) {
      long have = -1;  // the position cs/sn hold (positions are >= 0)
      for (int b = 0; b < B; ++b) {
        const long p = pos ? long(pos[long(b) * T_ + t]) : long(t);
        if (p != have) angles(cs.data(), sn.data(), inv_freq, p, half, double(scale));
        have = p;
        // Only q and k heads (H + KVH of them, contiguous) are rotated; v is untouched.
        rotate_row(qkv + (long(b) * T_ + t) * row_len, cs.data(), sn.data(), H + KVH, D, sign);
      }
    }
  }
}

}  // namespace

template <typename T>
void rope_forward(T* qkv, const float* inv_freq, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                  float scale) {
  rope_apply(qkv, inv_freq, pos, B, T_, H, KVH, D, T(1), scale);
}

template <typename T>
void rope_backward(T* dqkv, const float* inv_freq, const int32_t* pos, int B, int T_, int H, int KVH, int D,
                   float scale) {
  rope_apply(dqkv, inv_freq, pos, B, T_, H, KVH, D, T(-1), scale);
}

#define MT_INSTANTIATE(T)                                                                           \
  template void rope_forward<T>(T*, const float*, const int32_t*, int, int, int, int, int, float); \
  template void rope_backward<T>(T*, const float*, const int32_t*, int, int, int, int, int, float);
MT_INSTANTIATE(float)
MT_INSTANTIATE(double)
#undef MT_INSTANTIATE

}  // namespace mt::cpu

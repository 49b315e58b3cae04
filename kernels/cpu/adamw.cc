// Fused AdamW over a contiguous range (single-threaded; callers split ranges), and a
// deterministic double-precision sum of squares.
#include "kernels/adamw.h"

#include <cmath>

namespace mt::cpu {
namespace {

constexpr size_t kBlock = 256;

// The update in blocks of kBlock: two branch-free (vectorisable) passes around a plain sqrt
// pass. (With errno-setting math, GCC keeps a libm branch next to every sqrt, which would stop
// a single fused loop from vectorising.)
template <typename S, bool kShadow>
void adamw_loop(float* __restrict param, const S* __restrict grad, S* __restrict m,
                S* __restrict v, bf16* __restrict shadow, size_t n, const AdamWParams& p) {
  const float b1 = p.beta1, b2 = p.beta2, lr = p.lr, eps = p.eps, wd = p.weight_decay;
  const float gs = p.grad_scale;
  const float bc1 = float(1.0 - std::pow(double(b1), double(p.step)));
  const float bc2 = float(1.0 - std::pow(double(b2), double(p.step)));
  float mhat[kBlock], denom[kBlock];
  for (size_t i0 = 0; i0 < n; i0 += kBlock) {
    const size_t len = n - i0 < kBlock ? n - i0 : kBlock;
    for (size_t j = 0; j < len; ++j) {
      const size_t i = i0 + j;
      const float g = to_float(grad[i]) * gs;
      const float mi = b1 * to_float(m[i]) + (1.0f - b1) * g;
      const float vi = b2 * to_float(v[i]) + (1.0f - b2) * g * g;
      m[i] = from_float<S>(mi);
      v[i] = from_float<S>(vi);
      mhat[j] = mi / bc1;
      denom[j] = vi / bc2;
    }
    for (size_t j = 0; j < len; ++j) denom[j] = std::sqrt(denom[j]) + eps;
    for (size_t j = 0; j < len; ++j) {
      const size_t i = i0 + j;
      float w = param[i];
      w -= lr * (mhat[j] / denom[j] + wd * w);
      param[i] = w;
      if constexpr (kShadow) shadow[i] = float_to_bf16(w);
    }
  }
}

}  // namespace

template <typename S>
void adamw_update(float* param, const S* grad, S* m, S* v, bf16* shadow, size_t n,
                  const AdamWParams& p) {
  if (shadow != nullptr) {
    adamw_loop<S, true>(param, grad, m, v, shadow, n, p);
  } else {
    adamw_loop<S, false>(param, grad, m, v, nullptr, n, p);
  }
}

template <typename S>
double sum_squares(const S* x, size_t n) {
  constexpr size_t kLanes = 8;  // fixed lane split: vectorisable and independent of threads
  double acc[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t l = 0; l < kLanes; ++l) {
      const double xv = double(to_float(x[i + l]));
      acc[l] += xv * xv;
    }
  for (; i < n; ++i) {
    const double xv = double(to_float(x[i]));
    acc[0] += xv * xv;
  }
  double total = 0;
  for (size_t l = 0; l < kLanes; ++l) total += acc[l];
  return total;
}

template void adamw_update<float>(float*, const float*, float*, float*, bf16*, size_t,
                                  const AdamWParams&);
template void adamw_update<bf16>(float*, const bf16*, bf16*, bf16*, bf16*, size_t,
                                 const AdamWParams&);
template double sum_squares<float>(const float*, size_t);
template double sum_squares<bf16>(const bf16*, size_t);

}  // namespace mt::cpu

// Fused AdamW: one pass over param, grad, m, v (and an optional compute-dtype shadow).
//   g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2
//   p -= lr / (1-b1^t) * (m / (sqrt(v) / sqrt(1-b2^t) + eps)) + lr * wd * p
// with the step's constants (adamw_coefficients) rounded once to float, as every backend's
// kernel computes it.
// Single-threaded over the range it is given; callers split ranges over their own threads.
// Moments and gradients are stored as float ("exact" layout) or bf16 ("compact" layout).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/bf16.h"

namespace mt::cpu {

struct AdamWParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  float grad_scale = 1.0f;  // e.g. the clipping factor
  long step = 1;            // 1-based, for bias correction
};

// The step's constants, from double: lr / (1-b1^t), 1 / sqrt(1-b2^t) and lr * wd.
struct AdamWCoefficients {
  float step_size, inv_sqrt_bc2, decay;
};
inline AdamWCoefficients adamw_coefficients(const AdamWParams& p) {
  const double bc1 = 1.0 - std::pow(double(p.beta1), double(p.step));
  const double bc2 = 1.0 - std::pow(double(p.beta2), double(p.step));
  return {float(double(p.lr) / bc1), float(1.0 / std::sqrt(bc2)), float(double(p.lr) * double(p.weight_decay))};
}

// S is float or bf16 (storage of grad, m and v). shadow (bf16, may be nullptr) receives the
// updated parameter rounded to bf16 in the same pass.
template <typename S>
void adamw_update(float* param, const S* grad, S* m, S* v, bf16* shadow, size_t n,
                  const AdamWParams& p);

// Sum of squares in double (for the global gradient norm).
template <typename S>
double sum_squares(const S* x, size_t n);

}  // namespace mt::cpu

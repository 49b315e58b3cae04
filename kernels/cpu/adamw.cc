// Fused AdamW over a contiguous range (single-threaded; callers split ranges), and a
// deterministic double-precision sum of squares. The update is one source compiled for each
// ISA variant (kernels/cpu/isa.h) and dispatched by kernel_isa(); every variant does the same
// IEEE operations per element in the same order (division, sqrt, and the same FMA
// contractions: FMA exists in every variant), so all give identical bits.
#include "kernels/adamw.h"

#include <cmath>
#include <cstdint>

#include "kernels/cpu/isa.h"

#if MT_HAVE_AVX512_VARIANT
#include <immintrin.h>
#endif

namespace mt::cpu {
namespace {

// One fused, branch-free pass. This file is compiled with -fno-math-errno (kernels/
// CMakeLists.txt): the sqrt then vectorises instead of keeping a libm errno branch per element.
// The bias corrections fold into two constants (as DeepSpeed's CPUAdam does): one division and
// one square root an element, the rest multiplies and FMAs. Three divisions (m / bc1, v / bc2,
// then the quotient) made the update compute-bound on one core (1.30 G/s against CPUAdam's 1.64).
template <typename S, bool kShadow>
MT_ALWAYS_INLINE void adamw_loop(float* __restrict param, const S* __restrict grad,
                                 S* __restrict m, S* __restrict v, bf16* __restrict shadow,
                                 size_t n, const AdamWParams& p) {
  const AdamWCoefficients k = adamw_coefficients(p);
  const float b1 = p.beta1, b2 = p.beta2, gs = p.grad_scale;
  for (size_t i = 0; i < n; ++i) {
    const float g = to_float(grad[i]) * gs;
    const float mi = b1 * to_float(m[i]) + (1.0f - b1) * g;
    const float vi = b2 * to_float(v[i]) + (1.0f - b2) * g * g;
    m[i] = from_float<S>(mi);
    v[i] = from_float<S>(vi);
    const float denom = std::sqrt(vi) * k.inv_sqrt_bc2 + p.eps;
    float w = param[i];
    w -= k.step_size * (mi / denom) + k.decay * w;
    param[i] = w;
    if constexpr (kShadow) shadow[i] = float_to_bf16(w);
  }
}

template <typename S, bool kShadow>
void adamw_baseline(float* param, const S* grad, S* m, S* v, bf16* shadow, size_t n,
                    const AdamWParams& p) {
  adamw_loop<S, kShadow>(param, grad, m, v, shadow, n, p);
}

#if MT_HAVE_AVX512_VARIANT
// The bf16 shadow is written and never read back by the CPU (the uploads copy it by DMA), so a
// plain store first reads each of its lines from memory (2 of the 32 bytes a parameter moves).
// Streaming stores skip that read: the update writes the shadow of a block into L1, then streams
// it out whole lines at a time. Same rounding, same bits.
MT_TARGET_AVX512 void stream_out(bf16* __restrict dst, const bf16* __restrict src, size_t n) {
  size_t i = 0;
  for (; i < n && (reinterpret_cast<uintptr_t>(dst + i) & 63) != 0; ++i) dst[i] = src[i];
  for (; i + 32 <= n; i += 32)
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), _mm512_loadu_si512(src + i));
  for (; i < n; ++i) dst[i] = src[i];
}
#endif

template <typename S, bool kShadow>
MT_TARGET_AVX512 void adamw_avx512(float* param, const S* grad, S* m, S* v, bf16* shadow,
                                   size_t n, const AdamWParams& p) {
#if MT_HAVE_AVX512_VARIANT
  if constexpr (kShadow) {
    constexpr size_t kBlock = 2048;  // 4 KiB of shadow: stays in L1 between the two passes
    alignas(64) bf16 block[kBlock];
    for (size_t i = 0; i < n; i += kBlock) {
      const size_t b = n - i < kBlock ? n - i : kBlock;
      adamw_loop<S, true>(param + i, grad + i, m + i, v + i, block, b, p);
      stream_out(shadow + i, block, b);
    }
    _mm_sfence();  // streaming stores are weakly ordered: visible before the caller says done
    return;
  }
#endif
  adamw_loop<S, kShadow>(param, grad, m, v, shadow, n, p);
}

template <typename S, bool kShadow>
void adamw_dispatch(float* param, const S* grad, S* m, S* v, bf16* shadow, size_t n,
                    const AdamWParams& p) {
  if (kernel_isa() == Isa::kAvx512) {
    adamw_avx512<S, kShadow>(param, grad, m, v, shadow, n, p);
  } else {
    adamw_baseline<S, kShadow>(param, grad, m, v, shadow, n, p);
  }
}

}  // namespace

template <typename S>
void adamw_update(float* param, const S* grad, S* m, S* v, bf16* shadow, size_t n,
                  const AdamWParams& p) {
  if (shadow != nullptr) {
    adamw_dispatch<S, true>(param, grad, m, v, shadow, n, p);
  } else {
    adamw_dispatch<S, false>(param, grad, m, v, nullptr, n, p);
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

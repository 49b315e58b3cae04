// Private helpers shared by the CPU kernels (not part of the kernel API).
#pragma once
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

// OpenMP pragmas that vanish (without -Wunknown-pragmas noise) when OpenMP is not available.
#ifdef _OPENMP
#define MT_PRAGMA(x) _Pragma(#x)
#define MT_OMP(x) MT_PRAGMA(omp x)
#else
#define MT_OMP(x)
#endif

namespace mt::cpu::detail {

// exp(x) for float, branch-free so loops calling it vectorise (Cephes polynomial, ~2 ulp).
// Inputs below about -87 (including -inf) give exactly 0.
inline float fast_exp(float x) {
  const float xc = std::min(std::max(x, -87.0f), 88.0f);
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x / ln2)
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * (r * r) + r + 1.0f;
  const float pow2n = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return x < -87.0f ? 0.0f : y * pow2n;
}

inline double fast_exp(double x) { return std::exp(x); }

// tanh(x) = 1 - 2 / (1 + exp(2x)) through fast_exp, branch-free (vectorises): absolute error
// ~1e-7 (relative error grows near 0, where GeGLU multiplies it by x). Saturates to +-1.
inline float fast_tanh(float x) { return 1.0f - 2.0f / (1.0f + fast_exp(2.0f * x)); }
inline double fast_tanh(double x) { return std::tanh(x); }

// 256-bit vectors via the GCC/Clang vector extension (lowered to narrower ops where AVX is
// not enabled). Only used as locals inside inline functions.
template <typename T>
struct Vec;
template <>
struct Vec<float> {
  typedef float type __attribute__((vector_size(32)));
  static constexpr int width = 8;
};
template <>
struct Vec<double> {
  typedef double type __attribute__((vector_size(32)));
  static constexpr int width = 4;
};

// s[j] = exp(s[j] - shift) for j < n: fast_exp's formula on whole vectors of W floats (scalar
// tail; the lanes and the tail give the same bits, so the result does not depend on W).
// (The scalar form does not vectorise: its clamps are comparisons, which may trap, so GCC
// will not if-convert them.) Instantiated per ISA variant by exp_shifted (elementwise.cc).
template <int W>
struct FloatVec;
template <>
struct FloatVec<8> {
  typedef float type __attribute__((vector_size(32)));
  typedef int32_t ints __attribute__((vector_size(32)));
};
template <>
struct FloatVec<16> {
  typedef float type __attribute__((vector_size(64)));
  typedef int32_t ints __attribute__((vector_size(64)));
};

template <int W>
inline __attribute__((always_inline)) void exp_shifted_body(float* s, int n, float shift) {
  using V = typename FloatVec<W>::type;
  using VI = typename FloatVec<W>::ints;
  const int nv = n - n % W;
  for (int j = 0; j < nv; j += W) {
    V x;
    std::memcpy(&x, s + j, sizeof x);
    x -= shift;
    V xc = x < -87.0f ? V{} - 87.0f : x;
    xc = xc > 88.0f ? V{} + 88.0f : xc;
    const V nf = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    V r = xc - nf * 0.693359375f;
    r = r - nf * -2.12194440e-4f;
    V y = V{} + 1.9875691500e-4f;
    y = y * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * (r * r) + r + 1.0f;
    const VI bits = (__builtin_convertvector(nf, VI) + 127) << 23;
    V pow2n;
    std::memcpy(&pow2n, &bits, sizeof pow2n);
    y = x < -87.0f ? V{} : y * pow2n;
    std::memcpy(s + j, &y, sizeof y);
  }
  for (int j = nv; j < n; ++j) s[j] = fast_exp(s[j] - shift);
}

// exp_shifted_body at the widest vectors of the ISA variant running (kernel_isa()).
void exp_shifted(float* s, int n, float shift);

inline void exp_shifted(double* s, int n, double shift) {
  for (int j = 0; j < n; ++j) s[j] = std::exp(s[j] - shift);
}

// Register tile of the small matrix products: kMR rows by two vectors of columns.
constexpr int kMR = 4;
template <typename T>
constexpr int kNR = 2 * Vec<T>::width;

// C[0:kMR][0:kNR] (+)= A[0:kMR][0:K] @ B[0:K][0:kNR] (row-major with leading dimensions).
// Each C element is a k-ordered sum, so results do not depend on how callers split work.
template <bool kAccumulate, typename T>
inline void micro_tile(const T* A, long lda, const T* B, long ldb, int K, T* C, long ldc) {
  using V = typename Vec<T>::type;
  constexpr int W = Vec<T>::width;
  V acc[kMR][2];
  for (int r = 0; r < kMR; ++r) {
    if constexpr (kAccumulate) {
      std::memcpy(&acc[r][0], C + r * ldc, sizeof(V));
      std::memcpy(&acc[r][1], C + r * ldc + W, sizeof(V));
    } else {
      acc[r][0] = V{};
      acc[r][1] = V{};
    }
  }
  for (int k = 0; k < K; ++k) {
    V b0, b1;
    std::memcpy(&b0, B + k * ldb, sizeof(V));
    std::memcpy(&b1, B + k * ldb + W, sizeof(V));
    for (int r = 0; r < kMR; ++r) {
      const T a = A[r * lda + k];
      acc[r][0] += a * b0;
      acc[r][1] += a * b1;
    }
  }
  for (int r = 0; r < kMR; ++r) {
    std::memcpy(C + r * ldc, &acc[r][0], sizeof(V));
    std::memcpy(C + r * ldc + W, &acc[r][1], sizeof(V));
  }
}

// Whether a loop with about `work` flops/elements is big enough to be worth an OpenMP team
// (small calls stay serial: a fork/join costs more than they do, badly so on a busy host).
inline bool worth_parallel(long work) { return work >= (1L << 16); }

// Static split of [0, n) into `parts` contiguous ranges; returns [begin, end) of part p.
inline void split_range(long n, long parts, long p, long* begin, long* end) {
  const long base = n / parts, rem = n % parts;
  *begin = p * base + std::min(p, rem);
  *end = *begin + base + (p < rem ? 1 : 0);
}

}  // namespace mt::cpu::detail

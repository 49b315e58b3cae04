// bfloat16 storage type and conversions (round to nearest even), usable on host and device.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace mt {

struct bf16 {
  uint16_t bits = 0;
};

inline float bf16_to_float(bf16 x) {
  uint32_t u = uint32_t(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline bf16 float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{uint16_t(u >> 16)};
}

// Whole arrays, element by element as above.
inline void round_to_bf16(bf16* dst, const float* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}
inline void widen_bf16(float* dst, const bf16* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}

inline float to_float(float x) { return x; }
inline float to_float(bf16 x) { return bf16_to_float(x); }
template <typename S>
inline S from_float(float x);
template <>
inline float from_float<float>(float x) { return x; }
template <>
inline bf16 from_float<bf16>(float x) { return float_to_bf16(x); }

}  // namespace mt

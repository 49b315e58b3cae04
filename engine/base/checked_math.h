// Overflow-checked unsigned arithmetic for sizes computed from untrusted shapes (a model config
// or a job spec sent by a client): a product that does not fit 64 bits is reported, never
// wrapped into a small, plausible-looking number.
#pragma once
#include <cstdint>
#include <limits>
#include <optional>

namespace mt {

// a * b, or nullopt when the product does not fit uint64.
inline std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// Saturating forms for sums of products: kSaturated marks an overflow. No real size reaches it
// (16 EiB), so a result equal to kSaturated means "overflowed" and the caller refuses it.
inline constexpr uint64_t kSaturated = std::numeric_limits<uint64_t>::max();

inline uint64_t sat_mul(uint64_t a, uint64_t b) {
  if (a == kSaturated || b == kSaturated) return kSaturated;
  return checked_mul(a, b).value_or(kSaturated);
}
template <typename... R>
uint64_t sat_mul(uint64_t a, uint64_t b, R... rest) {
  return sat_mul(sat_mul(a, b), uint64_t(rest)...);
}
inline uint64_t sat_add(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? kSaturated : r;
}

}  // namespace mt

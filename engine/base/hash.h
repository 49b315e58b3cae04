// 64-bit FNV-1a of a byte string: stable names for things (tensors, pushes) across processes and
// versions. `basis` is the standard offset basis unless a caller has its own.
#pragma once
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace mt {

constexpr uint64_t kFnv1aBasis = 0xcbf29ce484222325ull;

inline uint64_t fnv1a64(std::string_view s, uint64_t basis = kFnv1aBasis) {
  uint64_t h = basis;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// `v` as 16 lowercase hex digits: how hashes and fingerprints are spelt in files and names.
inline std::string hex64(uint64_t v) {
  char s[17];
  std::snprintf(s, sizeof s, "%016" PRIx64, v);
  return s;
}

}  // namespace mt

#include "engine/model/init.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string_view>
#include <vector>

#include "engine/base/hash.h"

namespace mt {

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double normal_from(uint64_t key, uint64_t index) {
  uint64_t a = mix64(key ^ mix64(2 * index)), b = mix64(key ^ mix64(2 * index + 1));
  double u1 = (double(a >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
  double u2 = double(b >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
}

namespace {
// FNV-1a with this project's own basis since v0.1 (every initialisation depends on it).
uint64_t hash_name(std::string_view s) { return fnv1a64(s, 1469598103934665603ull); }
bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
}  // namespace

void init_unit_weights(const ModelConfig& cfg, const ParamSchema& unit, float* w, uint64_t seed, ThreadPool* pool) {
  constexpr size_t kPiece = size_t(1) << 16;
  struct Piece {
    const TensorSpec* t;
    size_t lo, hi;
  };
  std::vector<Piece> pieces;
  for (const auto& t : unit.tensors)
    for (size_t lo = 0; lo < t.numel; lo += kPiece) pieces.push_back({&t, lo, std::min(t.numel, lo + kPiece)});
  auto fill = [&](int i) {
    const Piece& pc = pieces[size_t(i)];
    const TensorSpec& t = *pc.t;
    float* p = w + t.offset;
    const bool norm = ends_with(t.name, "norm.weight"), bias = ends_with(t.name, ".bias") || ends_with(t.name, "_bias");
    if (norm || bias) {
      // a norm starts as the identity scale: w = 1, or 0 where the scale is 1 + w (Gemma)
      for (size_t k = pc.lo; k < pc.hi; ++k) p[k] = norm ? 1.0f - cfg.norm_offset : 0.0f;
      return;
    }
    const uint64_t key = mix64(seed) ^ hash_name(t.name);
    for (size_t k = pc.lo; k < pc.hi; ++k) p[k] = float(cfg.initializer_range * normal_from(key, k));
  };
  if (pool) pool->parallel_for(int(pieces.size()), fill);
  else for (size_t i = 0; i < pieces.size(); ++i) fill(int(i));
}

}  // namespace mt

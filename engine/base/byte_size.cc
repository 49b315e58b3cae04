#include "engine/base/byte_size.h"

#include <cctype>
#include <string>

namespace mt {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The bytes one unit stands for; 0 for a unit this rule does not know.
unsigned __int128 unit_bytes(std::string_view unit) {
  const std::string u = lower(unit);
  if (u.empty() || u == "b") return 1;
  static constexpr char kPrefixes[] = "kmgt";
  const size_t power = std::string_view(kPrefixes).find(u[0]) + 1;  // 0 when not a prefix
  if (power == 0) return 0;
  const std::string rest = u.substr(1);
  unsigned __int128 base;
  if (rest.empty() || rest == "i" || rest == "ib") base = 1024;
  else if (rest == "b") base = 1000;
  else return 0;
  unsigned __int128 bytes = 1;
  for (size_t i = 0; i < power; ++i) bytes *= base;
  return bytes;
}

}  // namespace

Result<uint64_t> parse_byte_size(std::string_view text) {
  const auto not_a_size = [&] {
    return invalid_argument("'" + std::string(text) + "' is not a size (e.g. 4096, 512M, 128GiB, 1.5TB)");
  };
  size_t at = 0;
  unsigned __int128 whole = 0, frac = 0, frac_scale = 1;
  constexpr unsigned __int128 kMax = ~uint64_t{0};
  for (; at < text.size() && std::isdigit(static_cast<unsigned char>(text[at])); ++at) {
    whole = whole * 10 + unsigned(text[at] - '0');
    if (whole > kMax) return invalid_argument("'" + std::string(text) + "' is more than 2^64 - 1 bytes");
  }
  const size_t whole_digits = at;
  size_t frac_digits = 0;
  if (at < text.size() && text[at] == '.') {
    for (++at; at < text.size() && std::isdigit(static_cast<unsigned char>(text[at])); ++at, ++frac_digits)
      if (frac_digits < 18) {  // finer than 10^-18 of a unit is below a byte for every unit here
        frac = frac * 10 + unsigned(text[at] - '0');
        frac_scale *= 10;
      }
  }
  if (whole_digits + frac_digits == 0) return not_a_size();
  const unsigned __int128 unit = unit_bytes(text.substr(at));
  if (unit == 0)
    return invalid_argument("'" + std::string(text) + "' has an unknown unit (use B, K/KiB, M/MiB, G/GiB, T/TiB, or KB, MB, GB, TB)");
  const unsigned __int128 bytes = whole * unit + frac * unit / frac_scale;  // both < 2^64 · 2^40
  if (bytes > kMax) return invalid_argument("'" + std::string(text) + "' is more than 2^64 - 1 bytes");
  return uint64_t(bytes);
}

}  // namespace mt

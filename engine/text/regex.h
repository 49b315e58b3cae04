// The Unicode regular expressions of tokenizer.json (Split patterns, the GPT-2 pattern of the
// byte-level pre-tokenizer), through PCRE2 with UTF and UCP, JIT-compiled when the library can.
// PCRE2 is optional at build time (MEGATRAIN_HAVE_PCRE2): without it compile() refuses, naming
// the library, so a tokenizer that needs a regex is refused rather than mis-split.
#pragma once
#include <cstddef>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/base/status.h"

namespace mt {

class Regex {
 public:
  // Longest pattern accepted: tokenizer.json patterns are a few hundred bytes.
  static constexpr size_t kMaxPatternBytes = 4096;
  // `literal`: the pattern is a plain string (Split's {"String": ...}), not a regex.
  static Result<std::unique_ptr<Regex>> compile(std::string_view pattern, bool literal = false);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends [begin, end) of every non-overlapping match in `text` (valid UTF-8), left to right.
  // Thread-safe. A match that exceeds PCRE2's backtracking limits is kResourceExhausted.
  Status find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const;

 private:
  Regex() = default;
  void* code_ = nullptr;  // pcre2_code_8
};

}  // namespace mt

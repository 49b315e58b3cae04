// tokenizer.json's "normalizer": NFC, NFKC (through utf8proc, optional at build time:
// MEGATRAIN_HAVE_UTF8PROC), Prepend, Replace (a plain string) and a Sequence of them. Applied to
// each piece of text between added tokens, as Hugging Face `tokenizers` applies it.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "engine/base/json.h"
#include "engine/base/status.h"

namespace mt {

class Normalizer {
 public:
  // A null or absent normalizer is the identity. Unsupported types are refused by name.
  static Result<Normalizer> parse(const Json* spec);

  bool empty() const { return steps_.empty(); }
  // Writes normalize(in) to `out` (cleared first). `in` is valid UTF-8.
  Status apply(std::string_view in, std::string& out) const;
  std::string describe() const;

 private:
  enum class Kind { kNfc, kNfkc, kPrepend, kReplace };
  struct Step {
    Kind kind;
    std::string a, b;  // Prepend: a = prefix; Replace: a -> b
  };
  static Status parse_into(const Json& spec, int depth, std::vector<Step>& steps);
  static Status apply_step(const Step& s, std::string_view in, std::string& out);
  std::vector<Step> steps_;
};

}  // namespace mt

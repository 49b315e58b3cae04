// tokenizer.json's "pre_tokenizer": how a normalized piece of text is cut into words before BPE.
// Supported: Split (a regex or string, behavior Isolated, invert false), ByteLevel (use_regex with
// the GPT-2 pattern; add_prefix_space false; last in a Sequence), Metaspace (prepend_scheme
// first/always/never, split) and a Sequence of them. Anything else is refused by name.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/base/json.h"
#include "engine/base/status.h"
#include "engine/text/regex.h"

namespace mt {

class PreTokenizer {
 public:
  static Result<PreTokenizer> parse(const Json* spec);

  // Words reach the model as bytes to be mapped through GPT-2's byte table (a ByteLevel step).
  bool byte_level() const { return byte_level_; }
  // Appends the words of `piece` to `words`. `at_start`: the piece begins the original text
  // (Metaspace's prepend_scheme "first"). The views point into `piece` or into per-thread
  // storage that stays valid until this thread's next split(). Thread-safe.
  Status split(std::string_view piece, bool at_start, std::vector<std::string_view>& words) const;
  std::string describe() const;

 private:
  enum class Kind { kSplit, kByteLevelRegex, kMetaspace };
  enum class Prepend { kFirst, kAlways, kNever };
  struct Step {
    Kind kind;
    std::shared_ptr<Regex> regex;  // kSplit, kByteLevelRegex
    std::string replacement;       // kMetaspace
    Prepend prepend = Prepend::kAlways;
    bool split = true;
  };
  static Status parse_into(const Json& spec, int depth, PreTokenizer& out);
  static Status parse_split(const Json& spec, PreTokenizer& out);
  static Status parse_byte_level(const Json& spec, PreTokenizer& out);
  static Status parse_metaspace(const Json& spec, PreTokenizer& out);
  Status regex_step(const Step& s, const std::vector<std::string_view>& in, std::vector<std::string_view>& out) const;
  void metaspace_step(const Step& s, bool at_start, std::string& buf, const std::vector<std::string_view>& in,
                      std::vector<std::string_view>& out) const;

  std::vector<Step> steps_;
  bool byte_level_ = false;
};

// The pattern GPT-2's byte-level pre-tokenizer splits with (use_regex: true).
extern const char* const kGpt2Pattern;

}  // namespace mt

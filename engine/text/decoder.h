// tokenizer.json's "decoder": ids' tokens back to text. Supported: ByteLevel, Metaspace, Replace
// (a plain string), ByteFallback, Fuse, Strip and a Sequence of them, each as Hugging Face
// `tokenizers` implements it; no decoder joins the tokens with spaces, as Hugging Face does.
#pragma once
#include <string>
#include <vector>

#include "engine/base/json.h"
#include "engine/base/status.h"

namespace mt {

class Decoder {
 public:
  static Result<Decoder> parse(const Json* spec);
  // The text of `tokens` (each as the vocabulary or added_tokens spells it). Consumes them.
  std::string decode(std::vector<std::string>& tokens) const;

 private:
  enum class Kind { kByteLevel, kMetaspace, kReplace, kByteFallback, kFuse, kStrip };
  struct Step {
    Kind kind;
    std::string a, b;  // Metaspace: a = replacement; Replace: a -> b; Strip: a = the character
    size_t start = 0, stop = 0;  // Strip
    bool prepend = true;         // Metaspace: prepend_scheme is not "never"
  };
  static Status parse_into(const Json& spec, int depth, std::vector<Step>& steps);
  static void apply(const Step& s, std::vector<std::string>& tokens);
  std::vector<Step> steps_;
  bool none_ = true;
};

}  // namespace mt

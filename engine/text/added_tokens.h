// tokenizer.json's "added_tokens" matched in text before the model sees it, as Hugging Face's
// AddedVocabulary does: leftmost-longest, non-overlapping; lstrip/rstrip take the whitespace
// beside a match into it. Tokens with normalized: false are matched in the raw text, the others
// (by their normalized content) in each normalized piece.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mt {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool lstrip = false, rstrip = false, normalized = false, special = false;
};

// A piece of text: [begin, end), and the added token it is (-1: plain text for the model).
struct TextSegment {
  size_t begin, end;
  int32_t id;
};

class AddedTokenMatcher {
 public:
  // `pattern` is what is searched for (the token's content, normalized for normalized tokens).
  // Call finish() after the last add().
  void add(const AddedToken& token, std::string pattern);
  void finish();
  // Cuts `text` into segments (empty ones left out). Thread-safe.
  void split(std::string_view text, std::vector<TextSegment>& out) const;

 private:
  struct Pattern {
    std::string text;
    int32_t id;
    bool lstrip, rstrip;
  };
  // Returns the longest pattern that matches at text[at], or nullptr.
  const Pattern* longest_at(std::string_view text, size_t at) const;
  std::vector<Pattern> patterns_;  // after finish(): by first byte, then longest first
  uint32_t bucket_[257] = {};      // patterns_[bucket_[b], bucket_[b + 1]) start with byte b
};

}  // namespace mt

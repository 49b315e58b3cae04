#include "engine/text/added_tokens.h"

#include <algorithm>

#include "engine/text/utf8.h"

namespace mt {

namespace {

// Bytes of whitespace at the start of s (Rust char::is_whitespace).
size_t leading_space(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    int len = 0;
    if (!utf8::is_whitespace(utf8::decode_at(s, i, &len))) break;
    i += size_t(len);
  }
  return i;
}

// The offset where the whitespace that ends s begins.
size_t trailing_space_start(std::string_view s) {
  size_t i = s.size();
  while (i > 0) {
    size_t j = i - 1;
    while (j > 0 && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) --j;
    int len = 0;
    if (!utf8::is_whitespace(utf8::decode_at(s, j, &len))) break;
    i = j;
  }
  return i;
}

}  // namespace

void AddedTokenMatcher::add(const AddedToken& token, std::string pattern) {
  if (pattern.empty()) return;  // an empty token can never be matched
  patterns_.push_back({std::move(pattern), token.id, token.lstrip, token.rstrip});
}

void AddedTokenMatcher::finish() {
  std::stable_sort(patterns_.begin(), patterns_.end(), [](const Pattern& a, const Pattern& b) {
    const auto fa = static_cast<unsigned char>(a.text[0]), fb = static_cast<unsigned char>(b.text[0]);
    return fa != fb ? fa < fb : a.text.size() > b.text.size();
  });
  size_t p = 0;
  for (int b = 0; b <= 256; ++b) {
    while (p < patterns_.size() && static_cast<unsigned char>(patterns_[p].text[0]) < b) ++p;
    bucket_[b] = uint32_t(p);
  }
}

const AddedTokenMatcher::Pattern* AddedTokenMatcher::longest_at(std::string_view text, size_t at) const {
  const auto b = static_cast<unsigned char>(text[at]);
  for (uint32_t i = bucket_[b]; i < bucket_[b + 1]; ++i) {
    const std::string& t = patterns_[i].text;
    if (text.size() - at >= t.size() && text.compare(at, t.size(), t) == 0) return &patterns_[i];
  }
  return nullptr;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<TextSegment>& out) const {
  if (patterns_.empty()) {  // nothing to match: the whole text, without a scan
    if (!text.empty()) out.push_back({0, text.size(), -1});
    return;
  }
  size_t done = 0;  // text before this is already in `out`
  size_t at = 0;
  while (at < text.size()) {
    const auto b = static_cast<unsigned char>(text[at]);
    const Pattern* m = bucket_[b] == bucket_[b + 1] ? nullptr : longest_at(text, at);
    if (!m) {
      ++at;
      continue;
    }
    size_t start = at, stop = at + m->text.size();
    at = stop;  // the next search starts after the match itself, as Hugging Face's does
    if (m->lstrip) start = std::max(trailing_space_start(text.substr(0, start)), done);
    if (m->rstrip) stop += leading_space(text.substr(stop));
    if (start > done) out.push_back({done, start, -1});
    out.push_back({start, stop, m->id});
    done = stop;
    at = std::max(at, stop);
  }
  if (done < text.size()) out.push_back({done, text.size(), -1});
}

}  // namespace mt

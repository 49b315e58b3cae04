#include "engine/text/hf_tokenizer.h"

#include <algorithm>

#include "engine/text/utf8.h"

namespace mt {

HfTokenizer::HfTokenizer(std::vector<AddedToken> added, Normalizer normalizer, PreTokenizer pre_tokenizer, Bpe bpe,
                         Decoder decoder)
    : added_(std::move(added)),
      normalizer_(std::move(normalizer)),
      pre_tokenizer_(std::move(pre_tokenizer)),
      bpe_(std::move(bpe)),
      decoder_(std::move(decoder)) {
  int32_t max_id = bpe_.max_id();
  for (const AddedToken& t : added_) max_id = std::max(max_id, t.id);
  vocab_size_ = max_id + 1;
  added_index_.assign(size_t(vocab_size_), -1);
  for (size_t i = 0; i < added_.size(); ++i) {
    const AddedToken& t = added_[i];
    added_index_[size_t(t.id)] = int32_t(i);
    if (!t.normalized) {
      raw_matcher_.add(t, t.content);
      added_text_.push_back(t.content);
      continue;
    }
    std::string pattern;
    if (normalizer_.empty() || !normalizer_.apply(t.content, pattern).ok()) pattern = t.content;
    normalized_matcher_.add(t, pattern);
    added_text_.push_back(std::move(pattern));
  }
  raw_matcher_.finish();
  normalized_matcher_.finish();
}

Status HfTokenizer::encode(std::string_view text, std::vector<int32_t>& ids) const {
  const size_t bad = utf8::valid_prefix(text);
  if (bad != text.size()) return invalid_argument("text is not valid UTF-8 at byte " + std::to_string(bad));
  thread_local std::vector<TextSegment> segments;
  segments.clear();
  raw_matcher_.split(text, segments);
  for (const TextSegment& s : segments) {
    if (s.id >= 0) ids.push_back(s.id);
    else MT_RETURN_IF_ERROR(encode_piece(text.substr(s.begin, s.end - s.begin), s.begin == 0, ids));
  }
  return Status::Ok();
}

// One piece between raw-matched added tokens: normalized, cut at normalized added tokens,
// pre-tokenized into words, and each word through BPE.
Status HfTokenizer::encode_piece(std::string_view piece, bool at_start, std::vector<int32_t>& ids) const {
  thread_local std::string normalized;
  thread_local std::vector<TextSegment> segments;
  thread_local std::vector<std::string_view> words;
  std::string_view text = piece;
  if (!normalizer_.empty()) {
    MT_RETURN_IF_ERROR(normalizer_.apply(piece, normalized));
    text = normalized;
  }
  segments.clear();
  normalized_matcher_.split(text, segments);
  for (const TextSegment& s : segments) {
    if (s.id >= 0) {
      ids.push_back(s.id);
      continue;
    }
    words.clear();
    MT_RETURN_IF_ERROR(pre_tokenizer_.split(text.substr(s.begin, s.end - s.begin), at_start && s.begin == 0, words));
    for (const std::string_view w : words) bpe_.encode_word(w, ids);
  }
  return Status::Ok();
}

Status HfTokenizer::decode(const int32_t* ids, size_t n, std::string& text) const {
  std::vector<std::string> tokens;
  tokens.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size_)
      return invalid_argument("token id " + std::to_string(id) + " at index " + std::to_string(i) + " is outside [0, " +
                              std::to_string(vocab_size_) + ")");
    if (added_index_[size_t(id)] >= 0) tokens.push_back(added_text_[size_t(added_index_[size_t(id)])]);
    else if (const std::string* t = bpe_.token(id)) tokens.push_back(*t);
    // an id in a gap of the vocabulary has no text, as in Hugging Face
  }
  text += decoder_.decode(tokens);
  return Status::Ok();
}

int32_t HfTokenizer::token_id(std::string_view content) const {
  for (const AddedToken& t : added_)
    if (t.content == content) return t.id;
  return bpe_.token_id(content);
}

std::string HfTokenizer::describe() const {
  std::string d = pre_tokenizer_.byte_level() ? "byte-level BPE" : "BPE";
  const std::string pre = pre_tokenizer_.describe();
  if (!pre.empty()) d += ", pre_tokenizer " + pre;
  if (!normalizer_.empty()) d += ", normalizer " + normalizer_.describe();
  d += ", " + std::to_string(vocab_size_) + " tokens, " + std::to_string(bpe_.merge_count()) + " merges, " +
       std::to_string(added_.size()) + " added tokens";
  return d;
}

}  // namespace mt

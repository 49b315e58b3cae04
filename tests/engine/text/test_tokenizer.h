// A test-only Tokenizer that behaves like a Hugging Face tokenizer where it matters for chat
// formatting: special tokens written in the text are matched first (each is one id, 256 + its
// index), and between them ordinary text is encoded greedily by the longest vocabulary entry (its
// "merges", ids after the special ones) or else byte by byte (ids 0..255).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "engine/text/tokenizer.h"

namespace mt::testing_util {

class TestTokenizer final : public Tokenizer {
 public:
  TestTokenizer(std::vector<std::string> special, std::vector<std::string> merges = {})
      : special_(std::move(special)), merges_(std::move(merges)) {}

  Status encode(std::string_view text, std::vector<int32_t>& ids) const override {
    size_t i = 0, plain = 0;  // [plain, i): ordinary text not yet encoded
    while (i < text.size()) {
      const int s = match(special_, text.substr(i));
      if (s < 0) {
        ++i;
        continue;
      }
      encode_plain(text.substr(plain, i - plain), ids);
      ids.push_back(int32_t(256 + s));
      i += special_[size_t(s)].size();
      plain = i;
    }
    encode_plain(text.substr(plain), ids);
    return Status::Ok();
  }
  Status decode(const int32_t* ids, size_t n, std::string& text) const override {
    for (size_t k = 0; k < n; ++k) {
      const int32_t id = ids[k];
      if (id < 0 || id >= vocab_size()) return invalid_argument("token id " + std::to_string(id) + " out of range");
      if (id < 256) text.push_back(char(id));
      else if (size_t(id - 256) < special_.size()) text += special_[size_t(id - 256)];
      else text += merges_[size_t(id - 256) - special_.size()];
    }
    return Status::Ok();
  }
  int32_t token_id(std::string_view content) const override {
    for (size_t k = 0; k < special_.size(); ++k)
      if (special_[k] == content) return int32_t(256 + k);
    for (size_t k = 0; k < merges_.size(); ++k)
      if (merges_[k] == content) return int32_t(256 + special_.size() + k);
    return content.size() == 1 ? int32_t(static_cast<unsigned char>(content[0])) : -1;
  }
  int vocab_size() const override { return int(256 + special_.size() + merges_.size()); }
  std::string describe() const override { return "test tokenizer"; }
  // What its post_processor would put around a sequence (a BOS, say): none unless set.
  Result<SequenceSpecials> sequence_specials() const override { return specials_; }
  TestTokenizer& with_specials(Result<SequenceSpecials> s) {
    specials_ = std::move(s);
    return *this;
  }

 private:
  // The longest entry of `list` that `text` starts with; -1 when none.
  static int match(const std::vector<std::string>& list, std::string_view text) {
    int best = -1;
    for (size_t k = 0; k < list.size(); ++k)
      if (text.starts_with(list[k]) && (best < 0 || list[k].size() > list[size_t(best)].size())) best = int(k);
    return best;
  }
  void encode_plain(std::string_view text, std::vector<int32_t>& ids) const {
    for (size_t i = 0; i < text.size();) {
      const int m = match(merges_, text.substr(i));
      if (m >= 0) {
        ids.push_back(int32_t(256 + special_.size() + size_t(m)));
        i += merges_[size_t(m)].size();
      } else {
        ids.push_back(int32_t(static_cast<unsigned char>(text[i++])));
      }
    }
  }

  std::vector<std::string> special_;
  std::vector<std::string> merges_;
  Result<SequenceSpecials> specials_ = SequenceSpecials{};
};

}  // namespace mt::testing_util

// A Hugging Face `tokenizers` tokenizer (tokenizer.json) of the BPE families this supports: the
// pipeline of Hugging Face's encode (added tokens, normalizer, pre-tokenizer, BPE) and decode.
// load_tokenizer (tokenizer_json.cc) builds it; data sources see only the Tokenizer interface.
#pragma once
#include <string>
#include <vector>

#include "engine/text/added_tokens.h"
#include "engine/text/bpe.h"
#include "engine/text/decoder.h"
#include "engine/text/normalizer.h"
#include "engine/text/pre_tokenizer.h"
#include "engine/text/tokenizer.h"

namespace mt {

class HfTokenizer final : public Tokenizer {
 public:
  HfTokenizer(std::vector<AddedToken> added, Normalizer normalizer, PreTokenizer pre_tokenizer, Bpe bpe,
              Decoder decoder);
  // tokenizer.json's post_processor, parsed against this tokenizer's vocabulary (or why not).
  void set_sequence_specials(Result<SequenceSpecials> s) { specials_ = std::move(s); }
  Result<SequenceSpecials> sequence_specials() const override { return specials_; }

  // Text that is not valid UTF-8 is kInvalidArgument naming the byte offset (Hugging Face
  // accepts only Unicode strings, so there is nothing to match).
  Status encode(std::string_view text, std::vector<int32_t>& ids) const override;
  Status decode(const int32_t* ids, size_t n, std::string& text) const override;
  int32_t token_id(std::string_view content) const override;
  int vocab_size() const override { return vocab_size_; }
  std::string describe() const override;

 private:
  Status encode_piece(std::string_view piece, bool at_start, std::vector<int32_t>& ids) const;

  std::vector<AddedToken> added_;
  // What decode() hands the decoder for each added token: the content, normalized for normalized
  // tokens (Hugging Face's id_to_token of a normalized added token is its normalized form).
  std::vector<std::string> added_text_;
  std::vector<int32_t> added_index_;  // by id: index into added_, or -1
  AddedTokenMatcher raw_matcher_, normalized_matcher_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  Bpe bpe_;
  Decoder decoder_;
  Result<SequenceSpecials> specials_ = SequenceSpecials{};
  int vocab_size_ = 0;
};

}  // namespace mt

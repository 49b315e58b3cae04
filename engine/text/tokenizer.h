// Tokenizer: text <-> token ids. One interface for the byte-level tokenizer of `data.source: text`
// and the Hugging Face tokenizers loaded from a model directory (tokenizer.json), so that data
// sources, `megatrain tokenize` and chat formatting never know which one they hold.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/base/status.h"
#include "engine/text/post_processor.h"

namespace mt {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Appends the ids of `text` to `ids`: no BOS/EOS is added; added and special tokens written in
  // the text are matched as Hugging Face `tokenizers` matches them by default. Thread-safe.
  virtual Status encode(std::string_view text, std::vector<int32_t>& ids) const = 0;
  // Appends the text of `ids` to `text` (special tokens as their content). An id outside
  // [0, vocab_size()) is kInvalidArgument naming it. Thread-safe.
  virtual Status decode(const int32_t* ids, size_t n, std::string& text) const = 0;
  // The id of a token given by its content ("<|im_end|>", "</s>", or any vocabulary entry as
  // tokenizer.json spells it); -1 when there is none.
  virtual int32_t token_id(std::string_view content) const = 0;
  // Ids are in [0, vocab_size()).
  virtual int vocab_size() const = 0;
  // One line for logs and errors, e.g. "byte-level BPE (qwen2 pattern), 151665 tokens".
  virtual std::string describe() const = 0;
  // What Hugging Face's encode with add_special_tokens (transformers' `tokenizer(text)`) puts
  // around one sequence: tokenizer.json's post_processor (post_processor.h). encode() never adds
  // them; the text and prompt_completion formats do. None by default; an error for a
  // post_processor this does not read (the tokenizer still encodes: chats need no template).
  virtual Result<SequenceSpecials> sequence_specials() const { return SequenceSpecials{}; }
};

// The byte-level tokenizer of data.source text: token = byte (vocab 256, no special tokens).
std::unique_ptr<Tokenizer> make_byte_tokenizer();

// A model directory (its tokenizer.json) or a tokenizer.json file. A model family or a
// tokenizer.json component this does not implement is refused by name, never mis-tokenized.
Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path);
// The same from tokenizer.json's text already in memory (at most 64 MiB).
Result<std::unique_ptr<Tokenizer>> tokenizer_from_json(std::string_view json_text);

}  // namespace mt

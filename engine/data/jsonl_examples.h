// From a data spec's names to what tokenizes a jsonl line: the tokenizer ("byte", a model
// directory or a tokenizer.json) and the ExampleFormatter of the chosen format and chat template.
// Shared by `data.source: jsonl` and `megatrain tokenize`.
#pragma once
#include <memory>
#include <string>

#include "engine/data/tokenize_files.h"
#include "engine/text/tokenizer.h"

namespace mt {

Result<std::shared_ptr<const Tokenizer>> open_tokenizer(const std::string& name);

struct LineFormat {
  LineFormatter format;
  std::string description;  // the formatter's describe()
  int32_t eos_id = -1;      // the formatter's eos_id()
};
// `format`: auto | text | prompt_completion | messages; `chat_template`: a name or auto. With the
// byte tokenizer no EOS is appended (it has none) and a chat template's markup is spelt in bytes.
Result<LineFormat> make_line_format(std::shared_ptr<const Tokenizer> tok, const std::string& tokenizer_name,
                                    const std::string& format, const std::string& chat_template);

// What a tokenizer and its format do to text, as 16 hex digits: the tokenizer's description,
// every id's text, the ids of a probe text of many scripts and the EOS its examples end with. Not
// the post_processor's BOS: one tokenizer file tokenizes as it did, and a run over text examples
// made before the BOS was added goes on with it (its data's contents differ: a resume warns).
// Equal for a copy or a re-saved file; other merges, pre-tokenizers, normalizers or EOS differ.
// A checkpoint records its data's (jsonl), a shard set's manifest the one that made its ids.
Result<std::string> tokenization_fingerprint(const Tokenizer& tok, const LineFormat& format);

}  // namespace mt

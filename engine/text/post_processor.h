// tokenizer.json's "post_processor": the special tokens Hugging Face `tokenizers` puts around one
// sequence when it encodes with add_special_tokens (its default, and transformers'
// `tokenizer(text)`): Llama 3's <|begin_of_text|>, Gemma's <bos>, Llama 2's and Mistral's <s>.
// Supported: TemplateProcessing (its "single" template), ByteLevel (offsets only: no ids), and a
// Sequence of them; RobertaProcessing, BertProcessing and the rest are refused by name. The
// pair template is not read (one sequence is all a training example is).
#pragma once
#include <cstdint>
#include <vector>

#include "engine/base/json.h"
#include "engine/base/status.h"

namespace mt {

struct SequenceSpecials {
  std::vector<int32_t> before, after;  // the template's ids before and after the sequence ($A)
  bool empty() const { return before.empty() && after.empty(); }
};

// null or absent: none. Ids are checked against [0, vocab_size).
Result<SequenceSpecials> parse_post_processor(const Json* spec, int vocab_size);

}  // namespace mt

// A training example as tokens with a loss mask: what a jsonl line becomes (plain text, a prompt
// and its completion, or a chat) and what packing places into sequences. ExampleFormatter turns
// one jsonl line into a TokenizedExample; docs/DATA.md ("Chat formats and the loss mask") says
// exactly which tokens are trained on for each format and chat template.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/base/status.h"
#include "engine/text/tokenizer.h"

namespace mt {

class Json;
class ChatTemplate;
struct ChatMessage;

struct TokenizedExample {
  std::vector<int32_t> ids;
  // loss[i] == 1: the model is trained to predict ids[i] from ids[0..i); 0: context only (a
  // prompt, a user turn, the template's markup). Same length as ids.
  std::vector<uint8_t> loss;
};

// The longest jsonl line (or plain-text document) an example may come from; readers stop there.
inline constexpr size_t kMaxExampleLineBytes = size_t(16) << 20;

struct ExampleFormatOptions {
  std::string format = "auto";         // auto | text | prompt_completion | messages (auto: by the line's keys)
  // auto (recognised from tokenizer_config.json) | llama3 | chatml | qwen2 | mistral | qwen3 | gemma | gemma2 | phi4
  std::string chat_template = "auto";
  std::string model_dir;               // where tokenizer_config.json is (may be empty: then chat_template must be a name)
  bool add_eos = true;                 // text / prompt_completion: append the EOS token (trained on)
  // The EOS token's content for add_eos; "" = tokenizer_config.json's eos_token, else the named
  // chat template's end-of-turn token. The tokenizer must know it (token_id != -1).
  std::string eos_token;
  // A chat template's markup (<|im_start|>, <|eot_id|>, ...) must be single special tokens of the
  // tokenizer, else create() refuses: a tokenizer of another family would mis-format every chat.
  // true lets a tokenizer without them (the byte-level one) spell the markup as ordinary tokens.
  bool markup_as_text = false;
  // What one hostile line may cost: longer lines and more messages are refused, not parsed.
  size_t max_line_bytes = kMaxExampleLineBytes;
  size_t max_messages = 4096;
};

// Holds a reference to the tokenizer given to create(), which must outlive it.
class ExampleFormatter {
 public:
  static Result<std::unique_ptr<ExampleFormatter>> create(const ExampleFormatOptions&, const Tokenizer&);
  ~ExampleFormatter();
  // One jsonl line -> ids + loss mask. Thread-safe. Errors name the field ("messages[2].role: 'tool' is not supported").
  Result<TokenizedExample> format(std::string_view json_line) const;
  // One plain-text document (a text file, or a paragraph of one) as the text format formats
  // {"text": document}, without the JSON: max_line_bytes bounds the document's own bytes, not its
  // escaped form (up to 6x). Refused unless the format is text or auto.
  Result<TokenizedExample> format_document(std::string_view text) const;
  // One line for logs, e.g. "messages with the chatml template, EOS <|im_end|> (id 151645)".
  std::string describe() const;
  // The token appended to each text / prompt_completion example; -1 when none is.
  int32_t eos_id() const { return options_.add_eos ? eos_id_ : -1; }

 private:
  enum class Format { kAuto, kText, kPromptCompletion, kMessages };
  ExampleFormatter(const ExampleFormatOptions& options, const Tokenizer& tokenizer);
  Status resolve_chat_template();
  Status resolve_eos();
  Status format_text(const Json& line, TokenizedExample& out) const;
  Status encode_text(std::string text, TokenizedExample& out) const;  // trained, then the EOS
  Status format_prompt_completion(const Json& line, TokenizedExample& out) const;
  Status format_messages(const Json& line, TokenizedExample& out) const;
  Status read_messages(const Json& line, std::vector<ChatMessage>& messages) const;
  Status read_reasoning(const Json& message, const std::string& where, ChatMessage& msg) const;
  Status refuse_markup(const std::string& text, const std::string& field) const;
  Status wrap_sequence(TokenizedExample& out, bool trained) const;  // the tokenizer's template around it
  Status append_eos(TokenizedExample& out) const;

  ExampleFormatOptions options_;
  const Tokenizer& tokenizer_;
  Format format_ = Format::kAuto;
  int32_t eos_id_ = -1;
  std::string eos_content_;
  SequenceSpecials specials_;  // text and prompt_completion: tokenizer.json's post_processor template
  Status specials_error_;      // why there is none for them (a post_processor this does not read)
  std::unique_ptr<const ChatTemplate> chat_;  // null when messages are not accepted
  Status chat_error_;                          // why (format auto without a usable template)
  Status eos_error_;                           // why eos_id_ is -1 while add_eos (format auto)
};

}  // namespace mt

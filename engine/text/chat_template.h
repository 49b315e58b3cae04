// Chat templates built in (no Jinja engine): Llama 3, ChatML, Qwen2 (Qwen2.5's), Mistral, Qwen3
// (with its <think> blocks), Gemma 3, Gemma 2 and Phi-4 render a conversation exactly as jinja2
// renders their official tokenizer_config.json `chat_template`, as pieces that say which text is
// trained on and where the template's special tokens are, so that ExampleFormatter can give each
// token its loss. docs/DATA.md says which official texts are recognised and what is refused.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/base/status.h"

namespace mt {

// A span of a rendered text: what tokenizes it, and whether its tokens are trained on.
struct TextPiece {
  std::string text;
  bool trained = false;  // loss 1 on the tokens of this text
  bool special = false;  // exactly one special token of the markup (<|im_start|>, </s>, ...)
};

struct ChatMessage {
  std::string role;  // system | user | assistant (others are refused before rendering)
  std::string content;
  // An assistant's reasoning, which only the qwen3 template renders (ExampleFormatter refuses it
  // for the others); without it Qwen3's template splits content at </think>.
  std::optional<std::string> reasoning_content = std::nullopt;
};

class ChatTemplate {
 public:
  enum class Family { kLlama3, kChatml, kQwen2, kMistral, kQwen3, kGemma, kGemma2, kPhi4 };

  // llama3 | chatml | qwen2 | mistral | qwen3 | gemma | gemma2 | phi4; anything else is
  // kInvalidArgument listing these.
  static Result<std::unique_ptr<const ChatTemplate>> by_name(std::string_view name);
  // The template whose official Jinja text `jinja` is, byte for byte (tests/fixtures/chat_templates
  // holds them with their source); any other text is kUnimplemented: it is never guessed at.
  static Result<std::unique_ptr<const ChatTemplate>> recognise(std::string_view jinja);
  // A model directory's template: its chat_template.jinja, else tokenizer_config.json's
  // chat_template (a string, or the entry named "default" of a list), then recognise().
  static Result<std::unique_ptr<const ChatTemplate>> from_model_dir(const std::string& dir);

  // Appends the conversation's pieces: markup untrained, assistant content and the token that
  // ends an assistant turn trained (Qwen3: with the <think> block the template prints). Roles the
  // family's template refuses (Mistral, Gemma: roles not alternating; Mistral: a system message
  // after the first; Gemma 2: any system message first) are kInvalidArgument naming messages[i].
  Status render(const std::vector<ChatMessage>& messages, std::vector<TextPiece>& pieces) const;

  Family family() const { return family_; }
  const std::string& name() const { return name_; }
  // The markup's special tokens; a tokenizer for this template must have each as one token.
  const std::vector<std::string>& special_tokens() const { return special_tokens_; }
  // The token that ends an assistant turn (trained on): <|eot_id|>, <|im_end|>, </s>, <end_of_turn>.
  const std::string& end_of_turn() const { return end_of_turn_; }
  // Whether the template renders ChatMessage::reasoning_content (qwen3 only).
  bool reads_reasoning() const { return family_ == Family::kQwen3; }

 private:
  ChatTemplate(Family family, std::string name, std::vector<std::string> special_tokens, std::string end_of_turn)
      : family_(family), name_(std::move(name)), special_tokens_(std::move(special_tokens)),
        end_of_turn_(std::move(end_of_turn)) {}
  Status render_llama3(const std::vector<ChatMessage>& messages, std::vector<TextPiece>& pieces) const;
  Status render_chatml(const std::vector<ChatMessage>& messages, std::vector<TextPiece>& pieces) const;
  Status render_mistral(const std::vector<ChatMessage>& messages, std::vector<TextPiece>& pieces) const;
  Status render_qwen3(const std::vector<ChatMessage>& messages, std::vector<TextPiece>& pieces) const;
  Status render_gemma(const std::vector<ChatMessage>& messages, std::vector<TextPiece>& pieces) const;
  Status render_phi4(const std::vector<ChatMessage>& messages, std::vector<TextPiece>& pieces) const;

  Family family_;
  std::string name_;
  std::vector<std::string> special_tokens_;
  std::string end_of_turn_;
};

// Python's str.strip() on UTF-8 text, as Jinja's `trim` filter does it: removes leading and
// trailing characters that Python calls whitespace (ASCII and Unicode spaces, \x1c-\x1f, U+0085,
// U+2028, ...). Invalid UTF-8 is left as it is.
std::string_view python_strip(std::string_view text);

}  // namespace mt

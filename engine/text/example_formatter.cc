// ExampleFormatter: one jsonl line -> ids and loss mask (text, prompt_completion, messages).
#include <string>
#include <vector>

#include "engine/base/json.h"
#include "engine/text/chat_template.h"
#include "engine/text/example.h"
#include "engine/text/piece_encoding.h"

namespace mt {

namespace {

constexpr size_t kMaxConfigBytes = size_t(64) << 20;

// tokenizer_config.json's eos_token: a string, or an object with "content" (older files).
Result<std::string> eos_from_model_dir(const std::string& dir) {
  const std::string path = dir + "/tokenizer_config.json";
  MT_ASSIGN_OR_RETURN(std::string text, read_file(path, kMaxConfigBytes));
  MT_ASSIGN_OR_RETURN(Json config, Json::parse(text));
  const Json* eos = config.find("eos_token");
  if (eos != nullptr && eos->is_object()) eos = eos->find("content");
  if (eos == nullptr || !eos->is_string() || eos->as_string().empty())
    return not_found(path + " has no eos_token, which the text and prompt_completion formats end each example with");
  return eos->as_string();
}

const Json* string_field(const Json& object, std::string_view key) {
  const Json* v = object.find(key);
  return v != nullptr && v->is_string() ? v : nullptr;
}

Status require_string(const Json& object, std::string_view key, const std::string& where) {
  const Json* v = object.find(key);
  if (v == nullptr) return invalid_argument(where + std::string(key) + ": missing");
  if (!v->is_string()) return invalid_argument(where + std::string(key) + ": must be a string");
  return Status::Ok();
}

}  // namespace

ExampleFormatter::ExampleFormatter(const ExampleFormatOptions& options, const Tokenizer& tokenizer)
    : options_(options), tokenizer_(tokenizer) {}
ExampleFormatter::~ExampleFormatter() = default;

Result<std::unique_ptr<ExampleFormatter>> ExampleFormatter::create(const ExampleFormatOptions& options,
                                                                   const Tokenizer& tokenizer) {
  std::unique_ptr<ExampleFormatter> f(new ExampleFormatter(options, tokenizer));
  const std::string& format = options.format;
  f->format_ = format == "auto"                ? Format::kAuto
               : format == "text"              ? Format::kText
               : format == "prompt_completion" ? Format::kPromptCompletion
               : format == "messages"          ? Format::kMessages
                                               : Format(-1);
  if (f->format_ == Format(-1))
    return invalid_argument("format '" + format + "' is not one of auto, text, prompt_completion, messages");
  const bool strict = f->format_ != Format::kAuto;  // a missing piece fails now, not on the first line
  if (f->format_ == Format::kAuto || f->format_ == Format::kMessages) {
    f->chat_error_ = f->resolve_chat_template();
    if (!f->chat_error_.ok() && (strict || f->chat_error_.code() == StatusCode::kInvalidArgument)) return f->chat_error_;
  }
  if (options.add_eos && f->format_ != Format::kMessages) {
    f->eos_error_ = f->resolve_eos();
    if (!f->eos_error_.ok() && strict) return f->eos_error_;
  }
  if (f->format_ != Format::kMessages) {  // chats render their own BOS
    Result<SequenceSpecials> specials = tokenizer.sequence_specials();
    if (specials.ok()) f->specials_ = *specials;
    else f->specials_error_ = specials.status().with_context("the text and prompt_completion formats");
    if (!f->specials_error_.ok() && strict) return f->specials_error_;
  }
  return f;
}

Status ExampleFormatter::resolve_chat_template() {
  if (options_.chat_template != "auto") {
    MT_ASSIGN_OR_RETURN(chat_, ChatTemplate::by_name(options_.chat_template));
  } else if (options_.model_dir.empty()) {
    return failed_precondition("chat_template auto needs model_dir (its tokenizer_config.json); or name the template");
  } else {
    MT_ASSIGN_OR_RETURN(chat_, ChatTemplate::from_model_dir(options_.model_dir));
  }
  if (options_.markup_as_text) return Status::Ok();
  for (const std::string& token : chat_->special_tokens()) {
    if (tokenizer_.token_id(token) >= 0) continue;
    Status missing = failed_precondition("the tokenizer (" + tokenizer_.describe() + ") has no token '" + token +
                                         "' of the " + chat_->name() + " chat template: it is not this family's "
                                         "tokenizer (markup_as_text spells markup as ordinary tokens)");
    chat_.reset();  // messages are refused with `missing`
    return missing;
  }
  return Status::Ok();
}

Status ExampleFormatter::resolve_eos() {
  eos_content_ = options_.eos_token;
  if (eos_content_.empty() && !options_.model_dir.empty()) {
    MT_ASSIGN_OR_RETURN(eos_content_, eos_from_model_dir(options_.model_dir));
  }
  if (eos_content_.empty())
    return failed_precondition("the text and prompt_completion formats end each example with the EOS token, and "
                               "no tokenizer_config.json beside the tokenizer names its eos_token: give the model directory "
                               "(its tokenizer.json and tokenizer_config.json) as the tokenizer");
  eos_id_ = tokenizer_.token_id(eos_content_);
  if (eos_id_ < 0)
    return failed_precondition("eos_token '" + eos_content_ + "' is not a token of the tokenizer (" +
                               tokenizer_.describe() + ")");
  return Status::Ok();
}

Result<TokenizedExample> ExampleFormatter::format(std::string_view json_line) const {
  if (json_line.size() > options_.max_line_bytes)
    return invalid_argument("the line is " + std::to_string(json_line.size()) + " bytes, over the limit of " +
                            std::to_string(options_.max_line_bytes) + " (max_line_bytes)");
  auto parsed = Json::parse(json_line);
  if (!parsed.ok()) return parsed.status().with_context("not JSON");
  const Json& line = *parsed;
  if (!line.is_object()) return invalid_argument("a line must be a JSON object");
  Format format = format_;
  if (format == Format::kAuto) {
    const bool messages = line.find("messages") != nullptr;
    const bool pc = line.find("prompt") != nullptr || line.find("completion") != nullptr;
    const bool text = line.find("text") != nullptr;
    if (int(messages) + int(pc) + int(text) != 1)
      return invalid_argument(messages || pc || text
                                  ? "the line mixes the keys of two formats (text; prompt and completion; messages)"
                                  : "the line has none of the keys text, prompt and completion, messages");
    format = messages ? Format::kMessages : pc ? Format::kPromptCompletion : Format::kText;
  }
  TokenizedExample out;
  switch (format) {
    case Format::kText: MT_RETURN_IF_ERROR(format_text(line, out)); break;
    case Format::kPromptCompletion: MT_RETURN_IF_ERROR(format_prompt_completion(line, out)); break;
    default: MT_RETURN_IF_ERROR(format_messages(line, out)); break;
  }
  return out;
}

Result<TokenizedExample> ExampleFormatter::format_document(std::string_view text) const {
  if (text.size() > options_.max_line_bytes)
    return invalid_argument("the document is " + std::to_string(text.size()) + " bytes, over the limit of " +
                            std::to_string(options_.max_line_bytes) + " (max_line_bytes)");
  if (format_ != Format::kAuto && format_ != Format::kText)
    return invalid_argument("a plain-text document is an example of the text format, not of format " +
                            options_.format);
  TokenizedExample out;
  MT_RETURN_IF_ERROR(encode_text(std::string(text), out));
  return out;
}

Status ExampleFormatter::format_text(const Json& line, TokenizedExample& out) const {
  MT_RETURN_IF_ERROR(require_string(line, "text", ""));
  return encode_text(string_field(line, "text")->as_string(), out);
}

Status ExampleFormatter::encode_text(std::string text, TokenizedExample& out) const {
  const TextPiece piece{std::move(text), /*trained=*/true, /*special=*/false};
  MT_RETURN_IF_ERROR(encode_pieces(tokenizer_, {&piece, 1}, false, out));
  MT_RETURN_IF_ERROR(wrap_sequence(out, /*trained=*/true));
  return append_eos(out);
}

Status ExampleFormatter::format_prompt_completion(const Json& line, TokenizedExample& out) const {
  MT_RETURN_IF_ERROR(require_string(line, "prompt", ""));
  MT_RETURN_IF_ERROR(require_string(line, "completion", ""));
  // One text, as TRL tokenizes prompt + completion: the boundary token, if the tokenizer merges
  // across it, is trained on.
  const TextPiece pieces[] = {{string_field(line, "prompt")->as_string(), false, false},
                              {string_field(line, "completion")->as_string(), true, false}};
  MT_RETURN_IF_ERROR(encode_pieces(tokenizer_, pieces, false, out));
  MT_RETURN_IF_ERROR(wrap_sequence(out, /*trained=*/false));
  return append_eos(out);
}

// Each message an object with a string role (system, user, assistant) and a string content, and
// for a template that renders it (qwen3) an assistant's reasoning_content (null: none); anything
// else a chat can hold (tool calls, images, names) is refused by its field's name.
Status ExampleFormatter::read_messages(const Json& line, std::vector<ChatMessage>& messages) const {
  for (const char* key : {"tools", "documents", "images", "add_generation_prompt"})
    if (line.find(key) != nullptr) return unimplemented(std::string(key) + ": is not supported (messages only)");
  const Json* list = line.find("messages");
  if (list == nullptr) return invalid_argument("messages: missing");
  if (!list->is_array()) return invalid_argument("messages: must be an array of {role, content}");
  if (list->items().empty()) return invalid_argument("messages: is empty");
  if (list->items().size() > options_.max_messages)
    return invalid_argument("messages: " + std::to_string(list->items().size()) + " messages, over the limit of " +
                            std::to_string(options_.max_messages) + " (max_messages)");
  bool any_assistant = false;
  for (size_t i = 0; i < list->items().size(); ++i) {
    const Json& m = list->items()[i];
    const std::string where = "messages[" + std::to_string(i) + "].";
    if (!m.is_object()) return invalid_argument(where.substr(0, where.size() - 1) + ": must be an object {role, content}");
    for (const auto& [key, value] : m.members())
      if (key != "role" && key != "content" && key != "reasoning_content")
        return unimplemented(where + key + ": is not supported (only role and content: no tool calls, names or images)");
    MT_RETURN_IF_ERROR(require_string(m, "role", where));
    const Json* content = m.find("content");
    if (content != nullptr && content->is_array())
      return unimplemented(where + "content: a list of parts (images, text parts) is not supported; give a string");
    MT_RETURN_IF_ERROR(require_string(m, "content", where));
    ChatMessage msg{m.find("role")->as_string(), content->as_string()};
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant")
      return unimplemented(where + "role: '" + msg.role + "' is not supported (system, user, assistant)");
    MT_RETURN_IF_ERROR(read_reasoning(m, where, msg));
    MT_RETURN_IF_ERROR(refuse_markup(msg.content, where + "content"));
    if (msg.reasoning_content) MT_RETURN_IF_ERROR(refuse_markup(*msg.reasoning_content, where + "reasoning_content"));
    any_assistant |= msg.role == "assistant";
    messages.push_back(std::move(msg));
  }
  if (!any_assistant) return invalid_argument("messages: no assistant turn, so nothing to train on");
  return Status::Ok();
}

// A message's reasoning_content: none when absent or null; a string only on an assistant message
// and for a template that renders it (the others would drop it silently).
Status ExampleFormatter::read_reasoning(const Json& message, const std::string& where, ChatMessage& msg) const {
  const Json* reasoning = message.find("reasoning_content");
  if (reasoning == nullptr || reasoning->is_null()) return Status::Ok();
  if (!reasoning->is_string()) return invalid_argument(where + "reasoning_content: must be a string or null");
  if (!chat_->reads_reasoning())
    return unimplemented(where + "reasoning_content: the " + chat_->name() +
                         " template does not render reasoning (qwen3's does); put it in content or leave it out");
  if (msg.role != "assistant")
    return unimplemented(where + "reasoning_content: only an assistant message's reasoning is rendered, not a " +
                         msg.role + " message's");
  msg.reasoning_content = reasoning->as_string();
  return Status::Ok();
}

// Text holding the template's markup would be read as those special tokens.
Status ExampleFormatter::refuse_markup(const std::string& text, const std::string& field) const {
  for (const std::string& token : chat_->special_tokens())
    if (text.find(token) != std::string::npos)
      return invalid_argument(field + ": contains '" + token + "', markup of the " + chat_->name() +
                              " template, which would be read as that special token");
  return Status::Ok();
}

Status ExampleFormatter::format_messages(const Json& line, TokenizedExample& out) const {
  if (!chat_) return chat_error_;
  std::vector<ChatMessage> messages;
  MT_RETURN_IF_ERROR(read_messages(line, messages));
  std::vector<TextPiece> pieces;
  MT_RETURN_IF_ERROR(chat_->render(messages, pieces));
  return encode_pieces(tokenizer_, pieces, /*check_special=*/!options_.markup_as_text, out);
}

// The tokenizer's template around the sequence, as `tokenizer(text)` adds it (Llama 3's
// <|begin_of_text|>, Gemma's <bos>): what comes before is trained as the text around it is (a
// prompt's is context); what comes after ends the example, trained as the EOS.
Status ExampleFormatter::wrap_sequence(TokenizedExample& out, bool trained) const {
  MT_RETURN_IF_ERROR(specials_error_);
  out.ids.insert(out.ids.begin(), specials_.before.begin(), specials_.before.end());
  out.loss.insert(out.loss.begin(), specials_.before.size(), uint8_t(trained));
  out.ids.insert(out.ids.end(), specials_.after.begin(), specials_.after.end());
  out.loss.insert(out.loss.end(), specials_.after.size(), uint8_t(1));
  return Status::Ok();
}

Status ExampleFormatter::append_eos(TokenizedExample& out) const {
  if (!options_.add_eos) return Status::Ok();
  if (!specials_.after.empty() && specials_.after.back() == eos_id_) return Status::Ok();  // the template's own
  if (eos_id_ < 0) return eos_error_;
  out.ids.push_back(eos_id_);
  out.loss.push_back(1);
  return Status::Ok();
}

std::string ExampleFormatter::describe() const {
  static const char* kNames[] = {"auto", "text", "prompt_completion", "messages"};
  std::string s = std::string("format ") + kNames[int(format_)];
  if (chat_) s += ", chat template " + chat_->name();
  auto ids = [](const std::vector<int32_t>& v) {
    std::string t;
    for (int32_t id : v) t += (t.empty() ? "" : " ") + std::to_string(id);
    return t;
  };
  if (!specials_.before.empty()) s += ", ids " + ids(specials_.before) + " before each text";
  if (!specials_.after.empty()) s += ", ids " + ids(specials_.after) + " after it";
  if (options_.add_eos && eos_id_ >= 0) s += ", EOS '" + eos_content_ + "' (id " + std::to_string(eos_id_) + ")";
  return s + "; tokenizer " + tokenizer_.describe();
}

}  // namespace mt

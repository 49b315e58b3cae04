// The built-in chat templates: each render_* mirrors its family's official Jinja template
// statement by statement (tests/fixtures/chat_templates/*.jinja), emitting pieces instead of one
// string so that the loss mask is known exactly.
#include "engine/text/chat_template.h"

#include <array>
#include <cstdint>

#include "engine/base/hash.h"
#include "engine/base/json.h"

namespace mt {

namespace {

constexpr std::string_view kQwenDefaultSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
constexpr size_t kMaxTemplateBytes = size_t(64) << 20;  // tokenizer_config.json (Mistral's is ~140 KB)

void add(std::vector<TextPiece>& pieces, std::string_view text, bool trained = false, bool special = false) {
  if (!text.empty()) pieces.push_back({std::string(text), trained, special});
}
void add_special(std::vector<TextPiece>& pieces, std::string_view token, bool trained = false) {
  add(pieces, token, trained, /*special=*/true);
}

// Decodes one UTF-8 code point at text[i] (its length in len); -1 for an invalid sequence.
int32_t decode_utf8(std::string_view text, size_t i, size_t& len) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const unsigned char c = b(0);
  len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
  if (len == 0 || i + len > text.size()) return len = 1, -1;
  int32_t cp = len == 1 ? c : c & (0x7f >> len);
  for (size_t k = 1; k < len; ++k) {
    if ((b(k) & 0xc0) != 0x80) return len = 1, -1;
    cp = (cp << 6) | (b(k) & 0x3f);
  }
  return cp;
}

// Python's str.isspace() for one code point (Py_UNICODE_ISSPACE: bidirectional class WS, B or S,
// or category Zs).
bool python_space(int32_t cp) {
  switch (cp) {
    case 0x20: case 0x85: case 0xa0: case 0x1680: case 0x2028: case 0x2029: case 0x202f: case 0x205f: case 0x3000:
      return true;
    default:
      return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x1f) || (cp >= 0x2000 && cp <= 0x200a);
  }
}

// The official template texts recognised, by FNV-1a 64 and length of their bytes (the texts
// themselves, with their sources, are tests/fixtures/chat_templates/*.jinja; a test checks that
// each fixture is recognised as its family).
struct KnownTemplate {
  uint64_t fnv1a;
  size_t bytes;
  std::string_view name;
};
constexpr std::array<KnownTemplate, 6> kKnownTemplates = {{
    {0x0e60067a5537498eull, 389, "llama3"},   // llama3-instruct.jinja (Meta-Llama-3-8B/70B-Instruct)
    {0x32844fd43eab01d2ull, 393, "llama3"},   //   the same with \n escapes for its newlines
    {0xc2b27ee60f1b8775ull, 2507, "qwen2"},   // qwen2.5-instruct.jinja (Qwen2.5-*-Instruct)
    {0xa41d6bae9b9141bcull, 199, "chatml"},   // chatml.jinja
    {0x88bf4138d5c826f0ull, 196, "chatml"},   //   the same with newline characters for its \n escapes
    {0x763320906faf8dbfull, 3959, "mistral"}, // mistral-v3.jinja (mistralai v3: Mistral-Large-Instruct-2407)
}};

}  // namespace

std::string_view python_strip(std::string_view text) {
  size_t begin = 0;
  while (begin < text.size()) {
    size_t len = 0;
    if (!python_space(decode_utf8(text, begin, len))) break;
    begin += len;
  }
  size_t end = text.size();
  while (end > begin) {
    // Step back to the start of the last code point (at most 4 bytes).
    size_t start = end - 1;
    while (start > begin && end - start < 4 && (static_cast<unsigned char>(text[start]) & 0xc0) == 0x80) --start;
    size_t len = 0;
    const int32_t cp = decode_utf8(text, start, len);
    if (start + len != end || !python_space(cp)) break;
    end = start;
  }
  return text.substr(begin, end - begin);
}

Result<std::unique_ptr<const ChatTemplate>> ChatTemplate::by_name(std::string_view name) {
  const auto make = [](ChatTemplate* t) { return Result<std::unique_ptr<const ChatTemplate>>(std::unique_ptr<const ChatTemplate>(t)); };
  if (name == "llama3")
    return make(new ChatTemplate(Family::kLlama3, "llama3",
                                 {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"},
                                 "<|eot_id|>"));
  if (name == "chatml")
    return make(new ChatTemplate(Family::kChatml, "chatml", {"<|im_start|>", "<|im_end|>"}, "<|im_end|>"));
  if (name == "qwen2")
    return make(new ChatTemplate(Family::kQwen2, "qwen2", {"<|im_start|>", "<|im_end|>"}, "<|im_end|>"));
  if (name == "mistral")
    return make(new ChatTemplate(Family::kMistral, "mistral", {"<s>", "</s>", "[INST]", "[/INST]"}, "</s>"));
  return invalid_argument("chat_template '" + std::string(name) +
                          "' is not built in (llama3, chatml, qwen2, mistral; or auto: from tokenizer_config.json)");
}

Result<std::unique_ptr<const ChatTemplate>> ChatTemplate::recognise(std::string_view jinja) {
  const uint64_t h = fnv1a64(jinja);
  for (const KnownTemplate& k : kKnownTemplates)
    if (k.fnv1a == h && k.bytes == jinja.size()) return by_name(k.name);
  return unimplemented("the chat template (" + std::to_string(jinja.size()) +
                       " bytes) is not one of the official templates built in (Meta-Llama-3 Instruct, Qwen2.5 "
                       "Instruct, ChatML, Mistral v3): give data.chat_template by name (llama3, chatml, qwen2, mistral) "
                       "if it renders the same text");
}

Result<std::unique_ptr<const ChatTemplate>> ChatTemplate::from_model_dir(const std::string& dir) {
  if (auto jinja = read_file(dir + "/chat_template.jinja", kMaxTemplateBytes); jinja.ok()) {
    auto t = recognise(*jinja);
    if (!t.ok()) return t.status().with_context(dir + "/chat_template.jinja");
    return t;
  }
  const std::string path = dir + "/tokenizer_config.json";
  MT_ASSIGN_OR_RETURN(std::string text, read_file(path, kMaxTemplateBytes));
  MT_ASSIGN_OR_RETURN(Json config, Json::parse(text));
  const Json* chat = config.find("chat_template");
  if (chat == nullptr || chat->is_null())
    return not_found(path + " has no chat_template (a base model?): give data.chat_template by name");
  if (chat->is_array()) {  // [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
    for (const Json& entry : chat->items()) {
      const Json* name = entry.find("name");
      const Json* body = entry.find("template");
      if (name && name->is_string() && name->as_string() == "default" && body && body->is_string()) {
        chat = body;
        break;
      }
    }
  }
  if (!chat->is_string()) return invalid_argument(path + ": chat_template is neither a string nor a list with a default");
  auto t = recognise(chat->as_string());
  if (!t.ok()) return t.status().with_context(path);
  return t;
}

Status ChatTemplate::render(const std::vector<ChatMessage>& messages, std::vector<TextPiece>& pieces) const {
  switch (family_) {
    case Family::kLlama3: return render_llama3(messages, pieces);
    case Family::kChatml:
    case Family::kQwen2: return render_chatml(messages, pieces);
    case Family::kMistral: return render_mistral(messages, pieces);
  }
  return internal_error("unknown chat template family");
}

// {% set content = '<|start_header_id|>' + role + '<|end_header_id|>\n\n' + content | trim + '<|eot_id|>' %},
// bos_token before the first message.
Status ChatTemplate::render_llama3(const std::vector<ChatMessage>& messages, std::vector<TextPiece>& pieces) const {
  for (size_t i = 0; i < messages.size(); ++i) {
    const bool assistant = messages[i].role == "assistant";
    if (i == 0) add_special(pieces, "<|begin_of_text|>");
    add_special(pieces, "<|start_header_id|>");
    add(pieces, messages[i].role);
    add_special(pieces, "<|end_header_id|>");
    add(pieces, "\n\n");
    add(pieces, python_strip(messages[i].content), assistant);
    add_special(pieces, "<|eot_id|>", assistant);
  }
  return Status::Ok();
}

// '<|im_start|>' + role + '\n' + content + '<|im_end|>' + '\n'; Qwen2.5's template first adds its
// default system turn when messages[0] is not a system message.
Status ChatTemplate::render_chatml(const std::vector<ChatMessage>& messages, std::vector<TextPiece>& pieces) const {
  const auto turn = [&](std::string_view role, std::string_view content) {
    const bool assistant = role == "assistant";
    add_special(pieces, "<|im_start|>");
    add(pieces, std::string(role) + "\n");
    add(pieces, content, assistant);
    add_special(pieces, "<|im_end|>", assistant);
    add(pieces, "\n");
  };
  if (family_ == Family::kQwen2 && (messages.empty() || messages[0].role != "system")) turn("system", kQwenDefaultSystem);
  for (const ChatMessage& m : messages) turn(m.role, m.content);
  return Status::Ok();
}

// Mistral's v3 template: an optional first system message, then user and assistant alternating;
// the system message is folded into the LAST message when that is a user message ("[INST] " +
// system + "\n\n" + content + "[/INST]") and, as in the official template, not rendered at all
// otherwise. Assistant turns are " " + content | trim + "</s>".
Status ChatTemplate::render_mistral(const std::vector<ChatMessage>& messages, std::vector<TextPiece>& pieces) const {
  const bool has_system = !messages.empty() && messages[0].role == "system";
  const size_t first = has_system ? 1 : 0;
  for (size_t i = first; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    const bool user_expected = (i - first) % 2 == 0;
    if (role != "user" && role != "assistant")
      return invalid_argument("messages[" + std::to_string(i) + "].role: '" + role +
                              "' is not supported by the mistral template (only a first system message, then user and "
                              "assistant)");
    if ((role == "user") != user_expected)
      return invalid_argument("messages[" + std::to_string(i) + "].role: '" + role +
                              "': the mistral template needs user and assistant turns to alternate, starting with user");
  }
  add_special(pieces, "<s>");
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user") {
      add_special(pieces, "[INST]");
      add(pieces, " ");
      if (has_system && i + 1 == messages.size()) add(pieces, messages[0].content + "\n\n");
      add(pieces, m.content);
      add_special(pieces, "[/INST]");
    } else {
      add(pieces, " ");
      add(pieces, python_strip(m.content), /*trained=*/true);
      add_special(pieces, "</s>", /*trained=*/true);
    }
  }
  return Status::Ok();
}

}  // namespace mt

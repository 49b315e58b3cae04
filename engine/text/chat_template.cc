// The built-in chat templates: each render_* mirrors its family's official Jinja template
// statement by statement (tests/fixtures/chat_templates/*.jinja), emitting pieces instead of one
// string so that the loss mask is known exactly.
#include "engine/text/chat_template.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "engine/base/hash.h"
#include "engine/base/json.h"

namespace mt {

namespace {

constexpr std::string_view kQwenDefaultSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr size_t kMaxTemplateBytes = size_t(64) << 20;  // tokenizer_config.json (Mistral's is ~140 KB)

void add(std::vector<TextPiece>& pieces, std::string_view text, bool trained = false, bool special = false) {
  if (!text.empty()) pieces.push_back({std::string(text), trained, special});
}
void add_special(std::vector<TextPiece>& pieces, std::string_view token, bool trained = false) {
  add(pieces, token, trained, /*special=*/true);
}

// '<|im_start|>' + role + '\n' + content + '<|im_end|>' + '\n', an assistant's content and its
// <|im_end|> trained.
void add_chatml_turn(std::vector<TextPiece>& pieces, std::string_view role, std::string_view content) {
  const bool assistant = role == "assistant";
  add_special(pieces, "<|im_start|>");
  add(pieces, std::string(role) + "\n");
  add(pieces, content, assistant);
  add_special(pieces, "<|im_end|>", assistant);
  add(pieces, "\n");
}

// Python's str.lstrip('\n'), rstrip('\n') and strip('\n').
std::string_view lstrip_newlines(std::string_view s) {
  return s.substr(std::min(s.find_first_not_of('\n'), s.size()));
}
std::string_view rstrip_newlines(std::string_view s) {
  const size_t last = s.find_last_not_of('\n');
  return s.substr(0, last == std::string_view::npos ? 0 : last + 1);
}
std::string_view strip_newlines(std::string_view s) { return lstrip_newlines(rstrip_newlines(s)); }

// The reasoning and the answer of an assistant message as Qwen3's template reads them: its
// reasoning_content when it has one (the content then stays whole), else the content split at
// </think>: reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n'),
// answer = content.split('</think>')[-1].lstrip('\n').
std::pair<std::string_view, std::string_view> qwen3_reasoning(const ChatMessage& m) {
  if (m.reasoning_content) return {*m.reasoning_content, m.content};
  const std::string_view content = m.content;
  const size_t close = content.find(kThinkClose);
  if (close == std::string_view::npos) return {{}, content};
  std::string_view reasoning = rstrip_newlines(content.substr(0, close));
  if (const size_t open = reasoning.rfind(kThinkOpen); open != std::string_view::npos)
    reasoning.remove_prefix(open + kThinkOpen.size());
  const std::string_view answer = content.substr(content.rfind(kThinkClose) + kThinkClose.size());
  return {lstrip_newlines(reasoning), lstrip_newlines(answer)};
}

// Qwen3's last_query_index: the last user message that is not a <tool_response>...</tool_response>,
// else the last message.
size_t qwen3_last_query(const std::vector<ChatMessage>& messages) {
  for (size_t i = messages.size(); i-- > 0;) {
    const std::string_view c = messages[i].content;
    if (messages[i].role == "user" && !(c.starts_with("<tool_response>") && c.ends_with("</tool_response>"))) return i;
  }
  return messages.size() - 1;
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
constexpr std::array<KnownTemplate, 11> kKnownTemplates = {{
    {0x0e60067a5537498eull, 389, "llama3"},   // llama3-instruct.jinja (Meta-Llama-3-8B/70B-Instruct)
    {0x32844fd43eab01d2ull, 393, "llama3"},   //   the same with \n escapes for its newlines
    {0xc2b27ee60f1b8775ull, 2507, "qwen2"},   // qwen2.5-instruct.jinja (Qwen2.5-*-Instruct)
    {0xa41d6bae9b9141bcull, 199, "chatml"},   // chatml.jinja
    {0x88bf4138d5c826f0ull, 196, "chatml"},   //   the same with newline characters for its \n escapes
    {0x763320906faf8dbfull, 3959, "mistral"}, // mistral-v3.jinja (mistralai v3: Mistral-Large-Instruct-2407)
    {0x959a4551391a6549ull, 4168, "qwen3"},   // qwen3.jinja (Qwen3 dense and MoE, as updated on the hub)
    {0x2bfdb7aa9754484eull, 4116, "qwen3"},   //   qwen3-first-release.jinja (the same models' April 2025 text)
    {0xc90dea00b85c935dull, 1532, "gemma"},   // gemma-3-it.jinja (google/gemma-3-*-it)
    {0x5c10ee65212d93b3ull, 591, "gemma2"},   // gemma-2-it.jinja (google/gemma-2-*-it, and Gemma 1's)
    {0x9acdd6b945e8e7f9ull, 462, "phi4"},     // phi-4.jinja (microsoft/phi-4)
}};

// The built-in templates: their markup's special tokens and the token that ends an assistant turn.
struct BuiltIn {
  std::string_view name;
  ChatTemplate::Family family;
  std::array<std::string_view, 4> special_tokens;  // "" past the last
  std::string_view end_of_turn;
};
using F = ChatTemplate::Family;
constexpr BuiltIn kBuiltIns[] = {
    {"llama3", F::kLlama3, {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}, "<|eot_id|>"},
    {"chatml", F::kChatml, {"<|im_start|>", "<|im_end|>"}, "<|im_end|>"},
    {"qwen2", F::kQwen2, {"<|im_start|>", "<|im_end|>"}, "<|im_end|>"},
    {"mistral", F::kMistral, {"<s>", "</s>", "[INST]", "[/INST]"}, "</s>"},
    // <think> and </think> are not markup here: Qwen3's tokenizer has them as ordinary added tokens,
    // and a content holding them is how a conversation gives the reasoning.
    {"qwen3", F::kQwen3, {"<|im_start|>", "<|im_end|>"}, "<|im_end|>"},
    {"gemma", F::kGemma, {"<bos>", "<start_of_turn>", "<end_of_turn>"}, "<end_of_turn>"},
    {"gemma2", F::kGemma2, {"<bos>", "<start_of_turn>", "<end_of_turn>"}, "<end_of_turn>"},
    {"phi4", F::kPhi4, {"<|im_start|>", "<|im_sep|>", "<|im_end|>"}, "<|im_end|>"},
};
constexpr std::string_view kBuiltInNames = "llama3, chatml, qwen2, mistral, qwen3, gemma, gemma2, phi4";

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
  for (const BuiltIn& b : kBuiltIns) {
    if (b.name != name) continue;
    std::vector<std::string> specials;
    for (std::string_view token : b.special_tokens)
      if (!token.empty()) specials.emplace_back(token);
    return std::unique_ptr<const ChatTemplate>(
        new ChatTemplate(b.family, std::string(b.name), std::move(specials), std::string(b.end_of_turn)));
  }
  return invalid_argument("chat_template '" + std::string(name) + "' is not built in (" + std::string(kBuiltInNames) +
                          "; or auto: from tokenizer_config.json)");
}

Result<std::unique_ptr<const ChatTemplate>> ChatTemplate::recognise(std::string_view jinja) {
  const uint64_t h = fnv1a64(jinja);
  for (const KnownTemplate& k : kKnownTemplates)
    if (k.fnv1a == h && k.bytes == jinja.size()) return by_name(k.name);
  return unimplemented("the chat template (" + std::to_string(jinja.size()) +
                       " bytes) is not one of the official templates built in (Meta-Llama-3 Instruct, Qwen2.5 "
                       "Instruct, ChatML, Mistral v3, Qwen3, Gemma 3, Gemma 2, Phi-4): give data.chat_template by name (" +
                       std::string(kBuiltInNames) + ") if it renders the same text");
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
    case Family::kQwen3: return render_qwen3(messages, pieces);
    case Family::kGemma:
    case Family::kGemma2: return render_gemma(messages, pieces);
    case Family::kPhi4: return render_phi4(messages, pieces);
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
  if (family_ == Family::kQwen2 && (messages.empty() || messages[0].role != "system"))
    add_chatml_turn(pieces, "system", kQwenDefaultSystem);
  for (const ChatMessage& m : messages) add_chatml_turn(pieces, m.role, m.content);
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

// Qwen3: ChatML turns (a first system message printed before the loop is the same turn), no
// default system message. An assistant message after the last user query is
// '<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') when it is the last
// message or has reasoning; any other assistant message is its content alone, its reasoning dropped.
// The whole assistant text after '<|im_start|>assistant\n', <think> block included, is trained.
Status ChatTemplate::render_qwen3(const std::vector<ChatMessage>& messages, std::vector<TextPiece>& pieces) const {
  const size_t last_query = qwen3_last_query(messages);
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user" || m.role == "system") add_chatml_turn(pieces, m.role, m.content);
    if (m.role != "assistant") continue;
    const auto [reasoning, content] = qwen3_reasoning(m);
    add_special(pieces, "<|im_start|>");
    add(pieces, "assistant\n");
    if (i > last_query && (i + 1 == messages.size() || !reasoning.empty())) {
      add(pieces, "<think>\n", /*trained=*/true);
      add(pieces, strip_newlines(reasoning), /*trained=*/true);
      add(pieces, "\n</think>\n\n", /*trained=*/true);
      add(pieces, lstrip_newlines(content), /*trained=*/true);
    } else {
      add(pieces, content, /*trained=*/true);
    }
    add_special(pieces, "<|im_end|>", /*trained=*/true);
    add(pieces, "\n");
  }
  return Status::Ok();
}

// Gemma 3: '<bos>'; a first system message becomes a prefix (+ '\n\n') of the first turn; then per
// message '<start_of_turn>' + ROLE + '\n' + content | trim + '<end_of_turn>\n', ROLE 'model' for
// the assistant. Turns must put user at even places from the first (others between: the template
// accepts any role there). Gemma 2's template instead refuses a system message first.
Status ChatTemplate::render_gemma(const std::vector<ChatMessage>& messages, std::vector<TextPiece>& pieces) const {
  const bool has_system = !messages.empty() && messages[0].role == "system";
  if (has_system && family_ == Family::kGemma2)
    return invalid_argument("messages[0].role: 'system' is not supported by the gemma2 template (Gemma 2's template "
                            "raises 'System role not supported')");
  const size_t first = has_system ? 1 : 0;
  for (size_t i = first; i < messages.size(); ++i)
    if ((messages[i].role == "user") != ((i - first) % 2 == 0))
      return invalid_argument("messages[" + std::to_string(i) + "].role: '" + messages[i].role + "': the " + name_ +
                              " template needs roles to alternate user/assistant, starting with user" +
                              (family_ == Family::kGemma ? " (after an optional first system message)" : ""));
  add_special(pieces, "<bos>");
  for (size_t i = first; i < messages.size(); ++i) {
    const bool assistant = messages[i].role == "assistant";
    add_special(pieces, "<start_of_turn>");
    add(pieces, (assistant ? std::string("model") : messages[i].role) + "\n");
    if (has_system && i == first) add(pieces, messages[0].content + "\n\n");
    add(pieces, python_strip(messages[i].content), assistant);
    add_special(pieces, "<end_of_turn>", assistant);
    add(pieces, "\n");
  }
  return Status::Ok();
}

// Phi-4: per system, user or assistant message '<|im_start|>' + ROLE + '<|im_sep|>' + content +
// '<|im_end|>', nothing between turns (the template prints nothing for other roles).
Status ChatTemplate::render_phi4(const std::vector<ChatMessage>& messages, std::vector<TextPiece>& pieces) const {
  for (const ChatMessage& m : messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant") continue;
    const bool assistant = m.role == "assistant";
    add_special(pieces, "<|im_start|>");
    add(pieces, m.role);
    add_special(pieces, "<|im_sep|>");
    add(pieces, m.content, assistant);
    add_special(pieces, "<|im_end|>", assistant);
  }
  return Status::Ok();
}

}  // namespace mt

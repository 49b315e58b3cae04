// load_tokenizer: tokenizer.json (as Hugging Face `tokenizers` writes it) -> HfTokenizer. What a
// hostile file can make this allocate is bounded: the file (kMaxFileBytes), the vocabulary and
// merges (Bpe::kMaxTokens, Bpe::kMaxMerges), added tokens (kMaxAddedTokens of kMaxAddedTokenBytes
// each) and regexes (Regex::kMaxPatternBytes).
#include <filesystem>

#include "engine/base/json.h"
#include "engine/text/hf_tokenizer.h"
#include "engine/text/utf8.h"

namespace mt {

namespace {

constexpr uint64_t kMaxFileBytes = uint64_t(64) << 20;  // Llama 3's is 9 MB, Qwen2's 7 MB
constexpr size_t kMaxAddedTokens = 1 << 16;
constexpr size_t kMaxAddedTokenBytes = 4096;

bool flag(const Json& spec, const char* key) {
  const Json* v = spec.find(key);
  return v && v->is_bool() && v->as_bool();
}

// A string option this does not implement must be absent, null or empty.
Status refuse_if_set(const Json& model, const char* key) {
  const Json* v = model.find(key);
  if (v && !v->is_null() && !(v->is_string() && v->as_string().empty()))
    return unimplemented(std::string("model.") + key + " is not supported (only null)");
  return Status::Ok();
}

Result<std::vector<std::pair<std::string, std::string>>> parse_merges(const Json* merges) {
  std::vector<std::pair<std::string, std::string>> out;
  if (!merges) return out;
  if (!merges->is_array()) return invalid_argument("model.merges is not a list");
  if (merges->items().size() > Bpe::kMaxMerges)
    return invalid_argument("model.merges has " + std::to_string(merges->items().size()) + " entries, more than " +
                            std::to_string(Bpe::kMaxMerges));
  out.reserve(merges->items().size());
  for (size_t i = 0; i < merges->items().size(); ++i) {
    const Json& m = merges->items()[i];
    if (m.is_string()) {  // "a b", the format before tokenizers 0.20
      const std::string& s = m.as_string();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        return invalid_argument("model.merges[" + std::to_string(i) + "] is not two tokens separated by a space");
      out.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.items().size() == 2 && m.items()[0].is_string() && m.items()[1].is_string()) {
      out.emplace_back(m.items()[0].as_string(), m.items()[1].as_string());
    } else {
      return invalid_argument("model.merges[" + std::to_string(i) + "] is neither \"a b\" nor [a, b]");
    }
  }
  return out;
}

Result<Bpe> parse_model(const Json* model, bool byte_level) {
  if (!model || !model->is_object()) return invalid_argument("no model");
  const Json* type = model->find("type");
  const std::string t = type && type->is_string() ? type->as_string() : "(none)";
  if (t != "BPE") return unimplemented("model type '" + t + "' is not supported (supported: BPE)");
  if (const Json* d = model->find("dropout"); d && !d->is_null() && !(d->is_number() && d->as_double() == 0))
    return unimplemented("model.dropout is not supported (only null)");
  MT_RETURN_IF_ERROR(refuse_if_set(*model, "continuing_subword_prefix"));
  MT_RETURN_IF_ERROR(refuse_if_set(*model, "end_of_word_suffix"));
  const Json* vocab = model->find("vocab");
  if (!vocab || !vocab->is_object()) return invalid_argument("model.vocab is not an object");
  if (vocab->members().size() > size_t(Bpe::kMaxTokens))
    return invalid_argument("model.vocab has " + std::to_string(vocab->members().size()) + " tokens, more than " +
                            std::to_string(Bpe::kMaxTokens));
  std::vector<std::pair<std::string, int32_t>> tokens;
  tokens.reserve(vocab->members().size());
  for (const auto& [tok, id] : vocab->members()) {
    if (!id.is_integer() || id.as_int() < 0 || id.as_int() >= Bpe::kMaxTokens)
      return invalid_argument("model.vocab['" + tok + "'] is not an id in [0, " + std::to_string(Bpe::kMaxTokens) + ")");
    tokens.emplace_back(tok, int32_t(id.as_int()));
  }
  MT_ASSIGN_OR_RETURN(auto merges, parse_merges(model->find("merges")));
  BpeOptions opt;
  if (const Json* unk = model->find("unk_token"); unk && unk->is_string()) opt.unk_token = unk->as_string();
  MT_RETURN_IF_ERROR(check_bool_fields(*model, {"fuse_unk", "byte_fallback", "ignore_merges"}, "model"));
  opt.fuse_unk = flag(*model, "fuse_unk");
  opt.byte_fallback = flag(*model, "byte_fallback");
  opt.ignore_merges = flag(*model, "ignore_merges");
  opt.byte_level = byte_level;
  return Bpe::create(std::move(tokens), merges, std::move(opt));
}

Result<std::vector<AddedToken>> parse_added_tokens(const Json* list) {
  std::vector<AddedToken> out;
  if (!list || list->is_null()) return out;
  if (!list->is_array()) return invalid_argument("added_tokens is not a list");
  if (list->items().size() > kMaxAddedTokens)
    return invalid_argument("added_tokens has more than " + std::to_string(kMaxAddedTokens) + " entries");
  for (size_t i = 0; i < list->items().size(); ++i) {
    const Json& a = list->items()[i];
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    const Json* id = a.find("id");
    const Json* content = a.find("content");
    if (!id || !id->is_integer() || id->as_int() < 0 || id->as_int() >= Bpe::kMaxTokens)
      return invalid_argument(where + " has no id in [0, " + std::to_string(Bpe::kMaxTokens) + ")");
    if (!content || !content->is_string() || content->as_string().empty() ||
        content->as_string().size() > kMaxAddedTokenBytes)
      return invalid_argument(where + " has no content of 1 to " + std::to_string(kMaxAddedTokenBytes) + " bytes");
    if (utf8::valid_prefix(content->as_string()) != content->as_string().size())
      return invalid_argument(where + " content is not valid UTF-8");
    MT_RETURN_IF_ERROR(check_bool_fields(a, {"single_word", "lstrip", "rstrip", "special", "normalized"}, where));
    if (flag(a, "single_word")) return unimplemented(where + " ('" + content->as_string() + "'): single_word is not supported");
    AddedToken t;
    t.id = int32_t(id->as_int());
    t.content = content->as_string();
    t.lstrip = flag(a, "lstrip");
    t.rstrip = flag(a, "rstrip");
    t.special = flag(a, "special");
    const Json* normalized = a.find("normalized");  // Hugging Face's default: !special
    t.normalized = normalized && normalized->is_bool() ? normalized->as_bool() : !t.special;
    out.push_back(std::move(t));
  }
  return out;
}

Result<std::unique_ptr<Tokenizer>> parse_tokenizer_json(const Json& root) {
  if (!root.is_object()) return invalid_argument("not a JSON object");
  MT_ASSIGN_OR_RETURN(Normalizer normalizer, Normalizer::parse(root.find("normalizer")));
  MT_ASSIGN_OR_RETURN(PreTokenizer pre, PreTokenizer::parse(root.find("pre_tokenizer")));
  MT_ASSIGN_OR_RETURN(Bpe bpe, parse_model(root.find("model"), pre.byte_level()));
  MT_ASSIGN_OR_RETURN(Decoder decoder, Decoder::parse(root.find("decoder")));
  MT_ASSIGN_OR_RETURN(std::vector<AddedToken> added, parse_added_tokens(root.find("added_tokens")));
  // The post_processor's template is kept for the formats that add it (sequence_specials);
  // truncation and padding are not applied: encode never truncates (see tokenizer.h).
  auto tok = std::make_unique<HfTokenizer>(std::move(added), std::move(normalizer), std::move(pre), std::move(bpe),
                                           std::move(decoder));
  tok->set_sequence_specials(parse_post_processor(root.find("post_processor"), tok->vocab_size()));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> tokenizer_from_json(std::string_view json_text) {
  if (json_text.size() > kMaxFileBytes)
    return invalid_argument("tokenizer.json of " + std::to_string(json_text.size()) + " bytes exceeds " +
                            std::to_string(kMaxFileBytes));
  MT_ASSIGN_OR_RETURN(Json root, Json::parse(json_text));
  return parse_tokenizer_json(root);
}

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path) {
  std::error_code ec;
  std::string file = path;
  if (std::filesystem::is_directory(path, ec)) file = (std::filesystem::path(path) / "tokenizer.json").string();
  auto text = read_file(file, kMaxFileBytes);
  if (!text.ok()) return text.status().with_context("loading tokenizer");
  auto tok = tokenizer_from_json(*text);
  if (!tok.ok()) return tok.status().with_context(file);
  return tok;
}

}  // namespace mt

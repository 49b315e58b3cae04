#include "engine/text/pre_tokenizer.h"

#include <utility>

#include "engine/text/utf8.h"

namespace mt {

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

constexpr const char* kSupported = "Split, ByteLevel, Metaspace, Sequence";

bool flag(const Json& spec, const char* key, bool def) {
  const Json* v = spec.find(key);
  return v && v->is_bool() ? v->as_bool() : def;
}

}  // namespace

Status PreTokenizer::parse_split(const Json& spec, PreTokenizer& out) {
  const Json* behavior = spec.find("behavior");
  const std::string b = behavior && behavior->is_string() ? behavior->as_string() : "";
  if (b != "Isolated")
    return unimplemented("pre_tokenizer Split with behavior '" + b + "' is not supported (supported: Isolated)");
  MT_RETURN_IF_ERROR(check_bool_fields(spec, {"invert"}, "pre_tokenizer Split"));
  if (flag(spec, "invert", false)) return unimplemented("pre_tokenizer Split with invert: true is not supported");
  const Json* pattern = spec.find("pattern");
  const Json* regex = pattern ? pattern->find("Regex") : nullptr;
  const Json* literal = pattern ? pattern->find("String") : nullptr;
  const Json* p = regex ? regex : literal;
  if (!p || !p->is_string() || p->as_string().empty())
    return invalid_argument("pre_tokenizer Split has no {\"Regex\"} or {\"String\"} pattern");
  auto compiled = Regex::compile(p->as_string(), /*literal=*/p == literal);
  if (!compiled.ok()) return compiled.status().with_context("pre_tokenizer Split");
  out.steps_.push_back({Kind::kSplit, std::shared_ptr<Regex>(std::move(*compiled)), {}, {}, true});
  return Status::Ok();
}

Status PreTokenizer::parse_byte_level(const Json& spec, PreTokenizer& out) {
  MT_RETURN_IF_ERROR(check_bool_fields(spec, {"add_prefix_space", "use_regex", "trim_offsets"}, "pre_tokenizer ByteLevel"));
  if (flag(spec, "add_prefix_space", false))
    return unimplemented("pre_tokenizer ByteLevel with add_prefix_space: true is not supported");
  if (flag(spec, "use_regex", true)) {
    auto compiled = Regex::compile(kGpt2Pattern);
    if (!compiled.ok()) return compiled.status().with_context("pre_tokenizer ByteLevel (use_regex)");
    out.steps_.push_back({Kind::kByteLevelRegex, std::shared_ptr<Regex>(std::move(*compiled)), {}, {}, true});
  }
  out.byte_level_ = true;
  return Status::Ok();
}

Status PreTokenizer::parse_metaspace(const Json& spec, PreTokenizer& out) {
  MT_RETURN_IF_ERROR(check_bool_fields(spec, {"split", "add_prefix_space"}, "pre_tokenizer Metaspace"));
  Step s{Kind::kMetaspace, nullptr, "\xE2\x96\x81", Prepend::kAlways, flag(spec, "split", true)};
  if (const Json* r = spec.find("replacement"); r && r->is_string()) s.replacement = r->as_string();
  int len = 0;
  if (s.replacement.empty() || utf8::valid_prefix(s.replacement) != s.replacement.size() ||
      (utf8::decode_at(s.replacement, 0, &len), size_t(len) != s.replacement.size()))
    return invalid_argument("pre_tokenizer Metaspace replacement must be one character");
  if (const Json* p = spec.find("prepend_scheme"); p && p->is_string()) {
    const std::string& v = p->as_string();
    if (v == "first") s.prepend = Prepend::kFirst;
    else if (v == "always") s.prepend = Prepend::kAlways;
    else if (v == "never") s.prepend = Prepend::kNever;
    else return unimplemented("pre_tokenizer Metaspace prepend_scheme '" + v + "' is not supported");
  } else if (!flag(spec, "add_prefix_space", true)) {
    s.prepend = Prepend::kNever;  // the format before prepend_scheme
  }
  out.steps_.push_back(std::move(s));
  return Status::Ok();
}

Status PreTokenizer::parse_into(const Json& spec, int depth, PreTokenizer& out) {
  if (!spec.is_object()) return invalid_argument("pre_tokenizer is not an object");
  const Json* type = spec.find("type");
  if (!type || !type->is_string()) return invalid_argument("pre_tokenizer has no type");
  const std::string& t = type->as_string();
  if (out.byte_level_)
    return unimplemented("pre_tokenizer '" + t + "' after ByteLevel is not supported (ByteLevel must come last)");
  if (t == "Sequence") {
    const Json* list = spec.find("pretokenizers");
    if (!list || !list->is_array()) return invalid_argument("pre_tokenizer Sequence has no pretokenizers list");
    if (depth > 4) return invalid_argument("pre_tokenizer Sequence nested too deeply");
    for (const Json& p : list->items()) MT_RETURN_IF_ERROR(parse_into(p, depth + 1, out));
    return Status::Ok();
  }
  if (t == "Split") return parse_split(spec, out);
  if (t == "ByteLevel") return parse_byte_level(spec, out);
  if (t == "Metaspace") return parse_metaspace(spec, out);
  return unimplemented("pre_tokenizer type '" + t + "' is not supported (supported: " + kSupported + ")");
}

Result<PreTokenizer> PreTokenizer::parse(const Json* spec) {
  PreTokenizer p;
  if (spec && !spec->is_null()) MT_RETURN_IF_ERROR(parse_into(*spec, 0, p));
  return p;
}

// Isolated: every match is a word, and so is every non-empty gap between matches.
Status PreTokenizer::regex_step(const Step& s, const std::vector<std::string_view>& in,
                                std::vector<std::string_view>& out) const {
  thread_local std::vector<std::pair<size_t, size_t>> matches;
  for (const std::string_view w : in) {
    matches.clear();
    MT_RETURN_IF_ERROR(s.regex->find_all(w, matches));
    size_t at = 0;
    for (const auto& [b, e] : matches) {
      if (b > at) out.push_back(w.substr(at, b - at));
      out.push_back(w.substr(b, e - b));
      at = e;
    }
    if (at < w.size()) out.push_back(w.substr(at));
  }
  return Status::Ok();
}

// Spaces become the replacement, which is prepended per the scheme; with split, each replacement
// starts a new word (MergedWithNext).
void PreTokenizer::metaspace_step(const Step& s, bool at_start, std::string& buf, const std::vector<std::string_view>& in,
                                  std::vector<std::string_view>& out) const {
  buf.clear();
  thread_local std::vector<std::pair<size_t, size_t>> ranges;
  ranges.clear();
  for (size_t i = 0; i < in.size(); ++i) {
    const std::string_view w = in[i];
    const size_t begin = buf.size();
    const bool starts_with_space = !w.empty() && w[0] == ' ';
    const bool already = starts_with_space || w.substr(0, s.replacement.size()) == s.replacement;
    if (!already && (s.prepend == Prepend::kAlways || (s.prepend == Prepend::kFirst && at_start && i == 0)))
      buf.append(s.replacement);
    for (const char c : w) {
      if (c == ' ') buf.append(s.replacement);
      else buf.push_back(c);
    }
    ranges.emplace_back(begin, buf.size());
  }
  const std::string_view all = buf;
  for (const auto& [b, e] : ranges) {
    const std::string_view w = all.substr(b, e - b);
    if (!s.split) {
      if (!w.empty()) out.push_back(w);
      continue;
    }
    size_t start = 0;
    for (size_t at = w.find(s.replacement, 1); at != std::string_view::npos; at = w.find(s.replacement, at + 1)) {
      out.push_back(w.substr(start, at - start));
      start = at;
    }
    if (start < w.size()) out.push_back(w.substr(start));
  }
}

Status PreTokenizer::split(std::string_view piece, bool at_start, std::vector<std::string_view>& words) const {
  if (steps_.empty()) {
    if (!piece.empty()) words.push_back(piece);
    return Status::Ok();
  }
  thread_local std::vector<std::string_view> a, b;
  thread_local std::vector<std::string> bufs;
  if (bufs.size() < steps_.size()) bufs.resize(steps_.size());
  a.assign(1, piece);
  for (size_t i = 0; i < steps_.size(); ++i) {
    b.clear();
    const Step& s = steps_[i];
    if (s.kind == Kind::kMetaspace) metaspace_step(s, at_start, bufs[i], a, b);
    else MT_RETURN_IF_ERROR(regex_step(s, a, b));
    a.swap(b);
  }
  for (const std::string_view w : a)
    if (!w.empty()) words.push_back(w);
  return Status::Ok();
}

std::string PreTokenizer::describe() const {
  std::string d;
  for (const Step& s : steps_) {
    if (!d.empty()) d += "+";
    d += s.kind == Kind::kMetaspace ? "Metaspace" : s.kind == Kind::kByteLevelRegex ? "ByteLevel(gpt2)" : "Split";
  }
  if (byte_level_ && (steps_.empty() || steps_.back().kind != Kind::kByteLevelRegex)) d += d.empty() ? "ByteLevel" : "+ByteLevel";
  return d;
}

}  // namespace mt

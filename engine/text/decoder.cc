#include "engine/text/decoder.h"

#include <algorithm>
#include <cstdlib>

#include "engine/text/utf8.h"

namespace mt {

namespace {

constexpr const char* kSupported = "ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence";

void byte_level(std::vector<std::string>& tokens) {
  std::string bytes;
  for (const std::string& t : tokens)  // a token with a character outside the byte table keeps its own bytes
    if (!utf8::append_byte_level_bytes(bytes, t)) bytes.append(t);
  std::string text;
  utf8::append_lossy(text, bytes);
  tokens.assign(1, std::move(text));
}

// <0xNN> runs become their bytes when those form UTF-8, else one U+FFFD per byte token.
void byte_fallback(std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  std::string run;
  size_t run_tokens = 0;
  auto flush = [&] {
    if (!run_tokens) return;
    if (utf8::valid_prefix(run) == run.size()) out.push_back(run);
    else for (size_t i = 0; i < run_tokens; ++i) out.emplace_back("\xEF\xBF\xBD");
    run.clear();
    run_tokens = 0;
  };
  for (std::string& t : tokens) {
    const auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f'); };
    if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && hex(t[3]) && hex(t[4])) {
      run.push_back(char(std::strtol(t.substr(3, 2).c_str(), nullptr, 16)));
      ++run_tokens;
      continue;
    }
    flush();
    out.push_back(std::move(t));
  }
  flush();
  tokens.swap(out);
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  std::string out;
  utf8::append_replaced(out, s, from, to);
  s.swap(out);
}

void strip(std::string& t, const std::string& ch, size_t start, size_t stop) {
  size_t b = 0, e = t.size();
  for (size_t i = 0; i < start && t.compare(b, ch.size(), ch) == 0 && b + ch.size() <= e; ++i) b += ch.size();
  for (size_t i = 0; i < stop && e >= b + ch.size() && t.compare(e - ch.size(), ch.size(), ch) == 0; ++i) e -= ch.size();
  t = t.substr(b, e - b);
}

}  // namespace

Status Decoder::parse_into(const Json& spec, int depth, std::vector<Step>& steps) {
  if (!spec.is_object()) return invalid_argument("decoder is not an object");
  const Json* type = spec.find("type");
  if (!type || !type->is_string()) return invalid_argument("decoder has no type");
  const std::string& t = type->as_string();
  auto str = [&](const char* key, const char* def) {
    const Json* v = spec.find(key);
    return v && v->is_string() ? v->as_string() : std::string(def);
  };
  auto count = [&](const char* key) {
    const Json* v = spec.find(key);
    return v && v->is_integer() && v->as_int() >= 0 ? size_t(std::min<int64_t>(v->as_int(), 1 << 20)) : size_t(0);
  };
  if (t == "Sequence") {
    const Json* list = spec.find("decoders");
    if (!list || !list->is_array()) return invalid_argument("decoder Sequence has no decoders list");
    if (depth > 4) return invalid_argument("decoder Sequence nested too deeply");
    for (const Json& d : list->items()) MT_RETURN_IF_ERROR(parse_into(d, depth + 1, steps));
    return Status::Ok();
  }
  if (t == "ByteLevel") steps.push_back({Kind::kByteLevel, {}, {}});
  else if (t == "ByteFallback") steps.push_back({Kind::kByteFallback, {}, {}});
  else if (t == "Fuse") steps.push_back({Kind::kFuse, {}, {}});
  else if (t == "Metaspace") {
    const Json* scheme = spec.find("prepend_scheme");
    const Json* add = spec.find("add_prefix_space");
    const bool prepend = scheme && scheme->is_string() ? scheme->as_string() != "never"
                                                       : !(add && add->is_bool() && !add->as_bool());
    Step s{Kind::kMetaspace, str("replacement", "\xE2\x96\x81"), {}};
    s.prepend = prepend;
    steps.push_back(std::move(s));
  } else if (t == "Replace") {
    const Json* pattern = spec.find("pattern");
    const Json* literal = pattern ? pattern->find("String") : nullptr;
    if (!literal || !literal->is_string() || literal->as_string().empty())
      return unimplemented("decoder Replace is supported with a non-empty {\"String\": ...} pattern only");
    steps.push_back({Kind::kReplace, literal->as_string(), str("content", "")});
  } else if (t == "Strip") {
    Step s{Kind::kStrip, str("content", " "), {}};
    if (utf8::valid_prefix(s.a) != s.a.size() || s.a.empty()) return invalid_argument("decoder Strip content is not a character");
    s.start = count("start");
    s.stop = count("stop");
    steps.push_back(std::move(s));
  } else {
    return unimplemented("decoder type '" + t + "' is not supported (supported: " + kSupported + ")");
  }
  return Status::Ok();
}

Result<Decoder> Decoder::parse(const Json* spec) {
  Decoder d;
  if (spec && !spec->is_null()) {
    MT_RETURN_IF_ERROR(parse_into(*spec, 0, d.steps_));
    d.none_ = false;
  }
  return d;
}

void Decoder::apply(const Step& s, std::vector<std::string>& tokens) {
  switch (s.kind) {
    case Kind::kByteLevel: byte_level(tokens); return;
    case Kind::kByteFallback: byte_fallback(tokens); return;
    case Kind::kFuse: {
      std::string all;
      for (const std::string& t : tokens) all += t;
      tokens.assign(1, std::move(all));
      return;
    }
    case Kind::kReplace:
      for (std::string& t : tokens) replace_all(t, s.a, s.b);
      return;
    case Kind::kStrip:
      for (std::string& t : tokens) strip(t, s.a, s.start, s.stop);
      return;
    case Kind::kMetaspace:  // every replacement in the first token is dropped when prepending
      for (size_t i = 0; i < tokens.size(); ++i) replace_all(tokens[i], s.a, i == 0 && s.prepend ? "" : " ");
      return;
  }
}

std::string Decoder::decode(std::vector<std::string>& tokens) const {
  std::string text;
  if (none_) {
    for (size_t i = 0; i < tokens.size(); ++i) text += (i ? " " : "") + tokens[i];
    return text;
  }
  for (const Step& s : steps_) apply(s, tokens);
  for (const std::string& t : tokens) text += t;
  return text;
}

}  // namespace mt

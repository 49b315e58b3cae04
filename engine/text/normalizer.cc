#include "engine/text/normalizer.h"

#include <cstdint>
#include <cstdlib>
#include <utility>

#ifdef MEGATRAIN_HAVE_UTF8PROC
#include <utf8proc.h>
#endif

#include "engine/text/utf8.h"

namespace mt {

namespace {

constexpr const char* kSupported = "NFC, NFKC, Prepend, Replace, Sequence";

// Text that NFC and NFKC leave unchanged without looking: every byte below 0xCC, i.e. code
// points below U+0300, where the first combining marks start (NFKC also maps some Latin-1
// characters, so it only skips ASCII).
bool skip_unicode_form(std::string_view s, bool compat) {
  const unsigned char limit = compat ? 0x80 : 0xCC;
  for (const char c : s)
    if (static_cast<unsigned char>(c) >= limit) return false;
  return true;
}

// Code points whose compatibility mappings came with Unicode 13 to 15 (utf8proc's tables) and
// that the tokenizers library's NFKC (older tables) leaves as they are: 134 in all, found by
// comparing the two over every code point. Kept as they are, so that the ids stay transformers'.
constexpr std::pair<uint32_t, uint32_t> kNewerCompat[] = {
    {0x32FF, 0x32FF},   {0xA7F2, 0xA7F4},   {0xAB69, 0xAB69},   {0x10781, 0x10785}, {0x10787, 0x107B0},
    {0x107B2, 0x107BA}, {0x1E030, 0x1E06D}, {0x1F16C, 0x1F16C}, {0x1FBF0, 0x1FBF9}};

bool newer_compat(uint32_t cp) {
  for (const auto& [lo, hi] : kNewerCompat)
    if (cp >= lo && cp <= hi) return true;
  return false;
}

Status unicode_form_of(std::string_view in, bool compat, std::string& out);

// NFKC with kNewerCompat's code points left as they are: the text between them normalized.
Status unicode_form(std::string_view in, bool compat, std::string& out) {
  if (!compat || utf8::valid_prefix(in) != in.size()) return unicode_form_of(in, compat, out);  // utf8proc says why
  out.clear();
  std::string part;
  size_t from = 0;
  for (size_t i = 0; i < in.size();) {
    int len = 1;
    const uint32_t cp = utf8::decode_at(in, i, &len);
    if (newer_compat(cp)) {
      MT_RETURN_IF_ERROR(unicode_form_of(in.substr(from, i - from), compat, part));
      out += part;
      out.append(in.substr(i, size_t(len)));
      from = i + size_t(len);
    }
    i += size_t(len);
  }
  if (from == 0) return unicode_form_of(in, compat, out);
  MT_RETURN_IF_ERROR(unicode_form_of(in.substr(from), compat, part));
  out += part;
  return Status::Ok();
}

Status unicode_form_of(std::string_view in, bool compat, std::string& out) {
#ifdef MEGATRAIN_HAVE_UTF8PROC
  utf8proc_uint8_t* mapped = nullptr;
  const int options = UTF8PROC_STABLE | UTF8PROC_COMPOSE | (compat ? UTF8PROC_COMPAT : 0);
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(in.data()),
                                          utf8proc_ssize_t(in.size()), &mapped, utf8proc_option_t(options));
  if (n < 0) return invalid_argument(std::string("normalizer: ") + utf8proc_errmsg(n));
  out.assign(reinterpret_cast<const char*>(mapped), size_t(n));
  std::free(mapped);
  return Status::Ok();
#else
  (void)in, (void)compat, (void)out;
  return unimplemented("this build has no utf8proc");
#endif
}

}  // namespace

Status Normalizer::parse_into(const Json& spec, int depth, std::vector<Step>& steps) {
  if (!spec.is_object()) return invalid_argument("normalizer is not an object");
  const Json* type = spec.find("type");
  if (!type || !type->is_string()) return invalid_argument("normalizer has no type");
  const std::string& t = type->as_string();
  auto str = [&](const char* key) -> const std::string* {  // text inserted must be valid UTF-8
    const Json* v = spec.find(key);
    return v && v->is_string() && utf8::valid_prefix(v->as_string()) == v->as_string().size() ? &v->as_string()
                                                                                                : nullptr;
  };
  if (t == "Sequence") {
    const Json* list = spec.find("normalizers");
    if (!list || !list->is_array()) return invalid_argument("normalizer Sequence has no normalizers list");
    if (depth > 4) return invalid_argument("normalizer Sequence nested too deeply");
    for (const Json& n : list->items()) MT_RETURN_IF_ERROR(parse_into(n, depth + 1, steps));
    return Status::Ok();
  }
  if (t == "NFC" || t == "NFKC") {
#ifndef MEGATRAIN_HAVE_UTF8PROC
    return unimplemented("normalizer type '" + t + "' needs utf8proc (libutf8proc-dev), which this build lacks");
#endif
    steps.push_back({t == "NFC" ? Kind::kNfc : Kind::kNfkc, {}, {}});
    return Status::Ok();
  }
  if (t == "Prepend") {
    const std::string* p = str("prepend");
    if (!p) return invalid_argument("normalizer Prepend has no prepend string of valid UTF-8");
    steps.push_back({Kind::kPrepend, *p, {}});
    return Status::Ok();
  }
  if (t == "Replace") {
    const Json* pattern = spec.find("pattern");
    const std::string* content = str("content");
    const Json* literal = pattern ? pattern->find("String") : nullptr;
    if (!content) return invalid_argument("normalizer Replace has no content string of valid UTF-8");
    if (!literal || !literal->is_string())
      return unimplemented("normalizer Replace is supported with a {\"String\": ...} pattern only");
    if (literal->as_string().empty()) return invalid_argument("normalizer Replace has an empty pattern");
    steps.push_back({Kind::kReplace, literal->as_string(), *content});
    return Status::Ok();
  }
  return unimplemented("normalizer type '" + t + "' is not supported (supported: " + kSupported + ")");
}

Result<Normalizer> Normalizer::parse(const Json* spec) {
  Normalizer n;
  if (spec && !spec->is_null()) MT_RETURN_IF_ERROR(parse_into(*spec, 0, n.steps_));
  return n;
}

Status Normalizer::apply_step(const Step& s, std::string_view in, std::string& out) {
  out.clear();
  switch (s.kind) {
    case Kind::kNfc:
    case Kind::kNfkc: {
      const bool compat = s.kind == Kind::kNfkc;
      if (skip_unicode_form(in, compat)) {
        out.assign(in);
        return Status::Ok();
      }
      return unicode_form(in, compat, out);
    }
    case Kind::kPrepend:
      if (!in.empty()) out.append(s.a);
      out.append(in);
      return Status::Ok();
    case Kind::kReplace:
      utf8::append_replaced(out, in, s.a, s.b);
      return Status::Ok();
  }
  return Status::Ok();
}

Status Normalizer::apply(std::string_view in, std::string& out) const {
  thread_local std::string scratch;
  out.assign(in);
  for (const Step& s : steps_) {
    MT_RETURN_IF_ERROR(apply_step(s, out, scratch));
    out.swap(scratch);
  }
  return Status::Ok();
}

std::string Normalizer::describe() const {
  std::string d;
  for (const Step& s : steps_) {
    if (!d.empty()) d += "+";
    d += s.kind == Kind::kNfc ? "NFC" : s.kind == Kind::kNfkc ? "NFKC" : s.kind == Kind::kPrepend ? "Prepend" : "Replace";
  }
  return d;
}

}  // namespace mt

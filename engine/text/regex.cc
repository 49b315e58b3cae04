#include "engine/text/regex.h"

#include <string>

#ifdef MEGATRAIN_HAVE_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

namespace mt {

#ifdef MEGATRAIN_HAVE_PCRE2

namespace {

// Per-thread match data (only the whole match is read) and JIT stack.
struct ThreadMatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, nullptr);
  ThreadMatchState() {
    if (context && stack) pcre2_jit_stack_assign(context, nullptr, stack);
    if (context) pcre2_set_match_limit(context, 10'000'000);
  }
  ~ThreadMatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

ThreadMatchState& thread_state() {
  thread_local ThreadMatchState state;
  return state;
}

// Unicode's White_Space, as the tokenizers library's Oniguruma reads \s: PCRE2's \s also takes
// U+180E (MONGOLIAN VOWEL SEPARATOR, a space until Unicode 6.3, a format character since), which
// split "a  \u180eb" otherwise than transformers does. \p{Z} is Zs, Zl and Zp.
constexpr std::string_view kWhiteSpace = R"(\t\n\x0B\f\r\x{85}\p{Z})";

// `pattern` with \s and \S spelt as White_Space (kWhiteSpace); \S inside a class is left as it is
// (a negated set cannot be spliced into a class; tokenizer.json patterns never write it there).
std::string with_unicode_white_space(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 's') out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      else if (e == 'S' && !in_class) out += "[^" + std::string(kWhiteSpace) + "]";
      else out += c, out += e;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];  // a leading ] is literal
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<Regex>> Regex::compile(std::string_view pattern, bool literal) {
  if (pattern.size() > kMaxPatternBytes)
    return invalid_argument("regex of " + std::to_string(pattern.size()) + " bytes exceeds the limit of " +
                            std::to_string(kMaxPatternBytes));
  int err = 0;
  PCRE2_SIZE err_at = 0;
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);  // PCRE2 refuses LITERAL with UCP
  const std::string spelt = literal ? std::string(pattern) : with_unicode_white_space(pattern);
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(spelt.data()), spelt.size(), options, &err, &err_at, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    return invalid_argument("regex does not compile at offset " + std::to_string(err_at) + ": " +
                            reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // interpreted matching when JIT is unavailable
  std::unique_ptr<Regex> re(new Regex);
  re->code_ = code;
  return re;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

Status Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const {
  ThreadMatchState& st = thread_state();
  if (!st.data || !st.context) return resource_exhausted("regex: out of memory for match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t at = 0;
  while (at < text.size()) {
    const int rc = pcre2_match(static_cast<pcre2_code*>(code_), subject, text.size(), at, PCRE2_NO_UTF_CHECK,
                               st.data, st.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      return resource_exhausted(std::string("regex match failed: ") + reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    size_t begin = ov[0], end = ov[1];
    if (end == begin) {  // an empty match: step over one character, as regex iterators do
      at = end + 1;
      while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
      continue;
    }
    matches.emplace_back(begin, end);
    at = end;
  }
  return Status::Ok();
}

#else  // no PCRE2

Result<std::unique_ptr<Regex>> Regex::compile(std::string_view, bool) {
  return unimplemented("this build has no PCRE2 (libpcre2-dev), which tokenizer.json regexes need");
}
Regex::~Regex() = default;
Status Regex::find_all(std::string_view, std::vector<std::pair<size_t, size_t>>&) const {
  return unimplemented("this build has no PCRE2");
}

#endif

}  // namespace mt

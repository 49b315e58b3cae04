// libFuzzer target: Hugging Face tokenizers. An even first byte: the rest is a tokenizer.json,
// which must load or fail with a Status (and, loaded, encode and decode a sample). An odd one:
// the rest is text for the committed Llama 3 and Mistral fixtures; valid UTF-8 must encode, and
// byte-level BPE without a normalizer must give it back exactly (decode(encode(x)) == x).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/text/tokenizer.h"

namespace {

const mt::Tokenizer* fixture(const char* name) {
  auto tok = mt::load_tokenizer(std::string(MEGATRAIN_SOURCE_DIR) + "/tests/fixtures/tokenizers/" + name);
  if (!tok.ok()) __builtin_trap();
  return tok->release();  // lives for the process
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::vector<int32_t> ids;
  std::string text;
  if (data[0] % 2 == 0) {
    auto tok = mt::tokenizer_from_json(rest);
    if (!tok.ok()) return 0;
    if ((*tok)->encode("Hello, wörld! 12345 <s> 日本 \n\t 😀", ids).ok())
      (void)(*tok)->decode(ids.data(), ids.size(), text);
    return 0;
  }
  static const mt::Tokenizer* llama3 = fixture("llama3");
  static const mt::Tokenizer* mistral = fixture("mistral");
  const mt::Status s = llama3->encode(rest, ids);
  if (!s.ok()) {
    if (s.code() != mt::StatusCode::kInvalidArgument && s.code() != mt::StatusCode::kResourceExhausted) __builtin_trap();
    return 0;
  }
  if (!llama3->decode(ids.data(), ids.size(), text).ok() || text != rest) __builtin_trap();
  ids.clear();
  text.clear();
  if (!mistral->encode(rest, ids).ok() || !mistral->decode(ids.data(), ids.size(), text).ok()) __builtin_trap();
  return 0;
}

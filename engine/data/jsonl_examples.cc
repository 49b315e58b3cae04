// The tokenizer and the ExampleFormatter that a data spec or `megatrain tokenize` names.
#include "engine/data/jsonl_examples.h"

#include <filesystem>

#include "engine/base/hash.h"
#include "engine/text/example.h"

namespace mt {

Result<std::shared_ptr<const Tokenizer>> open_tokenizer(const std::string& name) {
  if (name == "byte") return std::shared_ptr<const Tokenizer>(make_byte_tokenizer());
  MT_ASSIGN_OR_RETURN(auto tok, load_tokenizer(name));
  return std::shared_ptr<const Tokenizer>(std::move(tok));
}

Result<LineFormat> make_line_format(std::shared_ptr<const Tokenizer> tok, const std::string& tokenizer_name,
                                    const std::string& format, const std::string& chat_template) {
  ExampleFormatOptions o;
  o.format = format;
  o.chat_template = chat_template;
  if (tokenizer_name == "byte") {  // no EOS token, no special tokens: chat markup spelt in bytes
    o.add_eos = false;
    o.markup_as_text = true;
  }
  // The EOS token from tokenizer_config.json: in the model directory named, or beside the
  // tokenizer.json named (where a model directory keeps it).
  std::error_code ec;
  const std::filesystem::path named(tokenizer_name);
  if (tokenizer_name != "byte" && std::filesystem::is_directory(named, ec)) o.model_dir = tokenizer_name;
  else if (tokenizer_name != "byte" && std::filesystem::is_regular_file(named.parent_path() / "tokenizer_config.json", ec))
    o.model_dir = named.parent_path().string();
  MT_ASSIGN_OR_RETURN(std::unique_ptr<ExampleFormatter> f, ExampleFormatter::create(o, *tok));
  std::shared_ptr<const ExampleFormatter> shared(std::move(f));
  LineFormat out;
  out.description = shared->describe();
  out.eos_id = shared->eos_id();
  out.format.line = [shared, tok](std::string_view line) { return shared->format(line); };
  out.format.document = [shared, tok](std::string_view text) { return shared->format_document(text); };
  return out;
}

namespace {

void mix(uint64_t& h, std::string_view bytes) {
  const uint64_t n = bytes.size();  // lengths delimit the pieces
  h = fnv1a64(bytes, fnv1a64(std::string_view(reinterpret_cast<const char*>(&n), sizeof n), h));
}

// Text of many kinds (scripts, digits, whitespace runs, contractions, emoji, code, markup), whose
// ids tell apart tokenizers of one vocabulary with other merges, pre-tokenizers or normalizers.
constexpr std::string_view kProbe =
    "Hello, World! It's 2026-12-06: 3.14159 x 42 = 131.95...\t\n  spaces   and\ttabs.\r\n"
    "Ünïcödé naïve café — 日本語, русский, 🙂👍🏽 def f(x):\n    return x**2  # I'll see you're they've\n"
    "</s><s><|im_end|><|endoftext|> ▁x";

}  // namespace

Result<std::string> tokenization_fingerprint(const Tokenizer& tok, const LineFormat& format) {
  uint64_t h = 0;
  mix(h, tok.describe());
  std::string text;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    text.clear();
    MT_RETURN_IF_ERROR(tok.decode(&id, 1, text));
    mix(h, text);
  }
  std::vector<int32_t> ids;
  MT_RETURN_IF_ERROR(tok.encode(kProbe, ids));
  ids.push_back(format.eos_id);
  mix(h, std::string_view(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(int32_t)));
  return hex64(h);
}

}  // namespace mt

// The tokenizer and the ExampleFormatter that a data spec or `megatrain tokenize` names.
#include "engine/data/jsonl_examples.h"

#include <filesystem>

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
  std::error_code ec;
  if (tokenizer_name != "byte" && std::filesystem::is_directory(tokenizer_name, ec)) o.model_dir = tokenizer_name;
  MT_ASSIGN_OR_RETURN(std::unique_ptr<ExampleFormatter> f, ExampleFormatter::create(o, *tok));
  std::shared_ptr<const ExampleFormatter> shared(std::move(f));
  LineFormat out;
  out.description = shared->describe();
  out.eos_id = shared->eos_id();
  out.format.line = [shared, tok](std::string_view line) { return shared->format(line); };
  out.format.document = [shared, tok](std::string_view text) { return shared->format_document(text); };
  return out;
}

}  // namespace mt

// Opening a job's data sources from its spec, and comparing a checkpoint's description of its
// data with the data's now (job_data.h).
#include "engine/job/job_data.h"

#include "engine/base/hash.h"
#include "engine/data/example_set.h"
#include "engine/data/jsonl_examples.h"
#include "engine/data/tokenize_files.h"
#include "engine/job/job.h"

namespace mt {

namespace {
// data.eod_id: the source's batches carry the documents it delimits.
Result<std::unique_ptr<DataSource>> documents_of(Result<std::unique_ptr<DataSource>> src, const DataSpec& d,
                                                 int vocab) {
  if (!src.ok() || d.eod_id < 0) return src;
  return with_documents(std::move(src).value(), int32_t(d.eod_id), vocab);
}

// data.source jsonl: the whole file tokenized at job start, on all cores, before the step loop
// runs: next_batch only copies tokens, so no step ever waits on a tokenizer.
Result<std::unique_ptr<ExampleSet>> tokenize_jsonl_for_job(const DataSpec& d, int vocab) {
  MT_RETURN_IF_ERROR(check_unset_tokenizer("tokenizer", d, vocab));  // the caller names the source
  const std::string name = d.tokenizer.empty() ? "byte" : d.tokenizer;
  MT_ASSIGN_OR_RETURN(std::shared_ptr<const Tokenizer> tok, open_tokenizer(name));
  if (tok->vocab_size() > vocab)
    return invalid_argument("data.tokenizer (" + tok->describe() + ") has " + std::to_string(tok->vocab_size()) +
                            " tokens, more than the model's vocabulary of " + std::to_string(vocab));
  MT_ASSIGN_OR_RETURN(LineFormat f, make_line_format(tok, name, d.format, d.chat_template));
  return tokenize_jsonl(d.path, f.format, 0, tok->describe());
}

// jsonl and shards: tokenized examples, shuffled, packed or padded (engine/data/packing.h).
Result<std::unique_ptr<DataSource>> open_examples(const DataSpec& d, int vocab) {
  ExampleSourceOptions o;
  o.packing.packing = d.packing;
  o.packing.truncate = d.long_examples == "truncate";
  o.packing.seed = d.seed;
  o.epochs = d.epochs;
  std::unique_ptr<ExampleSet> set;
  if (d.source == "shards") {
    MT_ASSIGN_OR_RETURN(set, open_shard_example_set(d.path, vocab));
  } else {
    MT_ASSIGN_OR_RETURN(set, tokenize_jsonl_for_job(d, vocab));
  }
  if (set->trained_tokens() == 0)  // every step would be loss 0, gradient 0: a run that trains nothing
    return invalid_argument(set->describe() + " has no token the loss counts: every example's loss mask is 0 "
                            "(empty completions or assistant turns?)");
  return make_example_source(std::move(set), o);
}

Result<std::unique_ptr<DataSource>> open_source(const DataSpec& d, int vocab) {
  if (d.source == "jsonl" || d.source == "shards") return open_examples(d, vocab);
  if (d.source == "synthetic") return make_synthetic_source({d.seed, vocab, d.active_vocab, d.branching});
  if (d.source == "text") return make_text_source(d.path, vocab);
  if (d.source == "tokens") return make_token_file_source(d.path, d.dtype, vocab);
  return invalid_argument("data.source = '" + d.source + "' needs a provider (push data is served by the daemon)");
}

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

// What a tokenizer does: its description, every id's text, the ids of kProbe, and the EOS its
// examples end with.
Result<uint64_t> tokenization_fingerprint(const Tokenizer& tok, int32_t eos_id) {
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
  ids.push_back(eos_id);
  mix(h, std::string_view(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(int32_t)));
  return h;
}

// The formatter `d` names (its description names the tokenizer), and what it does; errors name `field`.
struct Tokenization {
  LineFormat format;
  uint64_t fingerprint = 0;
};
Result<Tokenization> tokenization_of(const DataSpec& d, const std::string& field) {
  const std::string name = d.tokenizer.empty() ? "byte" : d.tokenizer;
  auto tok = open_tokenizer(name);
  if (!tok.ok()) return tok.status().with_context(field + ".tokenizer");
  auto format = make_line_format(*tok, name, d.format, d.chat_template);
  if (!format.ok()) return format.status().with_context(field);
  Tokenization t{*format, 0};
  MT_ASSIGN_OR_RETURN(t.fingerprint, tokenization_fingerprint(**tok, t.format.eos_id));
  return t;
}
}  // namespace

Status check_eval_tokenizer(const JobSpec& spec) {
  const DataSpec &d = spec.data, &e = spec.eval.data;
  if (!spec.eval.enabled || d.source != "jsonl" || e.source != "jsonl") return Status::Ok();
  if (d.tokenizer == e.tokenizer) return Status::Ok();
  MT_ASSIGN_OR_RETURN(Tokenization train, tokenization_of(d, "data"));
  MT_ASSIGN_OR_RETURN(Tokenization held, tokenization_of(e, "eval.data"));
  if (train.fingerprint == held.fingerprint) return Status::Ok();
  return invalid_argument("eval.data.tokenizer '" + e.tokenizer + "' (" + held.format.description +
                          ") does not tokenize as data.tokenizer '" + d.tokenizer + "' (" + train.format.description +
                          ") does: the held-out loss would be measured in other token ids");
}

Result<std::string> data_tokenizer_fingerprint(const DataSpec& d) {
  if (d.source != "jsonl") return std::string();
  MT_ASSIGN_OR_RETURN(Tokenization t, tokenization_of(d, "data"));
  return hex64(t.fingerprint);
}

Result<std::unique_ptr<DataSource>> make_data_source(const DataSpec& data, int vocab) {
  return documents_of(open_source(data, vocab), data, vocab);
}

Result<std::unique_ptr<DataSource>> make_data_source(const JobSpec& spec, int vocab) {
  return make_data_source(spec.data, vocab);
}

Result<std::unique_ptr<DataSource>> open_job_data(const JobSpec& spec, const JobHooks& hooks, int vocab) {
  if (spec.data.source != "push") return make_data_source(spec, vocab);
  if (!hooks.make_push_source) return invalid_argument("data.source = push needs the daemon");
  return documents_of(hooks.make_push_source(spec, vocab), spec.data, vocab);
}

namespace {

// `d` without its field that starts with `field` (", tokenizer "), up to the next comma or
// closing parenthesis outside the field's own parentheses.
std::string without_field(std::string d, const std::string& field) {
  const size_t at = d.find(field);
  if (at == std::string::npos) return d;
  size_t end = at + field.size();
  for (int depth = 0; end < d.size(); ++end) {
    if (d[end] == '(') ++depth;
    else if (d[end] == ')' && depth-- == 0) break;
    else if (d[end] == ',' && depth == 0) break;
  }
  return d.erase(at, end - at);
}

// `d` without its last field when that is the epoch count (", 3 epochs", ", epochs unbounded"):
// the data position counts rows from epoch 0 whatever the bound, so raising it is the same data.
std::string without_epochs(std::string d) {
  const size_t at = d.rfind(", ");
  if (at == std::string::npos) return d;
  const std::string_view last = std::string_view(d).substr(at);
  if (last == ", epochs unbounded" || (last.size() > 9 && last.substr(last.size() - 7) == " epochs")) d.erase(at);
  return d;
}

}  // namespace

bool same_data_description(const std::string& was, std::string now) {
  for (const char* field : {", tokenizer ", ", tokenized for a vocabulary of ", ", sample "})
    if (was.find(field) == std::string::npos) now = without_field(now, field);
  return without_epochs(was) == without_epochs(now);
}

}  // namespace mt

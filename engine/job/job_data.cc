// Opening a job's data sources from its spec, and comparing a checkpoint's description of its
// data with the data's now (job_data.h).
#include "engine/job/job_data.h"

#include "engine/base/hash.h"
#include "engine/data/example_set.h"
#include "engine/data/jsonl_examples.h"
#include "engine/data/shard_set.h"
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

// The tokenizer `d`'s ids come from, named as an error names it, and what it does (empty where
// unknown: ids given as such, a single shard file, a manifest older than the record). jsonl:
// data.tokenizer with its format; shards: the one `megatrain tokenize` recorded in the manifest.
struct DataTokenizer {
  std::string name, fingerprint;
};
Result<DataTokenizer> data_tokenizer(const DataSpec& d, const std::string& field) {
  if (d.source == "shards") {
    const ShardTokenizer s = shard_set_tokenizer(d.path);
    return DataTokenizer{"the tokenizer '" + s.name + "' that made " + field + ".path's shards", s.tokenization};
  }
  if (d.source != "jsonl") return DataTokenizer{};
  const std::string name = d.tokenizer.empty() ? "byte" : d.tokenizer;
  auto tok = open_tokenizer(name);
  if (!tok.ok()) return tok.status().with_context(field + ".tokenizer");
  auto format = make_line_format(*tok, name, d.format, d.chat_template);
  if (!format.ok()) return format.status().with_context(field);
  MT_ASSIGN_OR_RETURN(std::string fingerprint, tokenization_fingerprint(**tok, *format));
  return DataTokenizer{field + ".tokenizer '" + d.tokenizer + "' (" + format->description + ")", fingerprint};
}
}  // namespace

Status check_eval_tokenizer(const JobSpec& spec) {
  const DataSpec &d = spec.data, &e = spec.eval.data;
  if (!spec.eval.enabled) return Status::Ok();
  if (d.source == "jsonl" && e.source == "jsonl" && d.tokenizer == e.tokenizer) return Status::Ok();
  MT_ASSIGN_OR_RETURN(const DataTokenizer held, data_tokenizer(e, "eval.data"));
  if (held.fingerprint.empty()) return Status::Ok();
  MT_ASSIGN_OR_RETURN(const DataTokenizer train, data_tokenizer(d, "data"));
  if (train.fingerprint.empty() || train.fingerprint == held.fingerprint) return Status::Ok();
  return invalid_argument(held.name + " does not tokenize as " + train.name +
                          " does: the held-out loss would be measured in other token ids");
}

Result<std::string> data_tokenizer_fingerprint(const DataSpec& d) {
  MT_ASSIGN_OR_RETURN(const DataTokenizer t, data_tokenizer(d, "data"));
  return t.fingerprint;
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
  for (const char* field : {", tokenizer ", ", tokenized for a vocabulary of ", ", sample ", ", contents "})
    if (was.find(field) == std::string::npos) now = without_field(now, field);
  return without_epochs(was) == without_epochs(now);
}

}  // namespace mt

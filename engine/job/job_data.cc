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
}  // namespace

namespace {
// What a tokenizer maps ids to: its description and every id's text.
Result<uint64_t> vocabulary_fingerprint(const Tokenizer& tok) {
  uint64_t h = fnv1a64(tok.describe());
  std::string text;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    text.clear();
    MT_RETURN_IF_ERROR(tok.decode(&id, 1, text));
    h = fnv1a64(text, fnv1a64(std::string_view(reinterpret_cast<const char*>(&id), sizeof id), h));
  }
  return h;
}
}  // namespace

Status check_eval_tokenizer(const JobSpec& spec) {
  const DataSpec &d = spec.data, &e = spec.eval.data;
  if (!spec.eval.enabled || d.source != "jsonl" || e.source != "jsonl") return Status::Ok();
  const std::string train = d.tokenizer.empty() ? "byte" : d.tokenizer, held = e.tokenizer.empty() ? "byte" : e.tokenizer;
  if (train == held) return Status::Ok();
  MT_ASSIGN_OR_RETURN(std::shared_ptr<const Tokenizer> a, open_tokenizer(train));
  MT_ASSIGN_OR_RETURN(std::shared_ptr<const Tokenizer> b, open_tokenizer(held));
  MT_ASSIGN_OR_RETURN(uint64_t fa, vocabulary_fingerprint(*a));
  MT_ASSIGN_OR_RETURN(uint64_t fb, vocabulary_fingerprint(*b));
  if (fa == fb) return Status::Ok();
  return invalid_argument("eval.data.tokenizer '" + held + "' (" + b->describe() + ") is not data.tokenizer '" + train +
                          "' (" + a->describe() + "): the held-out loss would be measured in other token ids");
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

}  // namespace

bool same_data_description(const std::string& was, std::string now) {
  for (const char* field : {", tokenizer ", ", tokenized for a vocabulary of "})
    if (was.find(field) == std::string::npos) now = without_field(now, field);
  return was == now;
}

}  // namespace mt

// megatrain tokenize INPUT... --tokenizer DIR|byte --out DIR: jsonl and plain-text files to token
// shards (engine/data/token_shard.h, docs/DATA.md), formatted on a thread pool, with a progress
// bar on stderr and a summary (--json: one object).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "client/cli.h"
#include "client/progress.h"
#include "engine/data/jsonl_examples.h"
#include "engine/data/shard_set.h"

namespace mt::cli {

namespace {

namespace fs = std::filesystem;

struct TokenizeOptions {
  std::vector<std::string> inputs;
  std::string tokenizer, out, format = "auto", chat_template = "auto";
  InputKind text_kind = InputKind::kTextFile;
  int threads = 0;
  uint64_t shard_tokens = uint64_t(64) << 20;
};

Result<TokenizeOptions> parse(const Args& a) {
  TokenizeOptions o;
  o.inputs = a.positional();
  o.tokenizer = a.get("tokenizer");
  o.out = a.get("out");
  if (o.inputs.empty() || o.tokenizer.empty() || o.out.empty())
    return invalid_argument("tokenize needs INPUT files, --tokenizer and --out");
  o.format = a.get("format", o.format);
  o.chat_template = a.get("chat-template", o.chat_template);
  const std::string split = a.get("text-split", "file");
  if (split != "file" && split != "blank-lines")
    return invalid_argument("--text-split = '" + split + "' is not one of file, blank-lines");
  if (split == "blank-lines") o.text_kind = InputKind::kTextParagraphs;
  MT_ASSIGN_OR_RETURN(const int64_t threads, a.integer("threads", 0, 0, 1024));  // 0: all cores
  o.threads = int(threads);
  MT_ASSIGN_OR_RETURN(const int64_t shard, a.integer("shard-tokens", int64_t(o.shard_tokens), 1, int64_t(ShardFormat::kMaxTokens)));
  o.shard_tokens = uint64_t(shard);
  return o;
}

InputKind kind_of(const std::string& path, const TokenizeOptions& o) {
  const std::string ext = fs::path(path).extension().string();
  return ext == ".jsonl" || ext == ".json" ? InputKind::kJsonl : o.text_kind;
}

struct Totals {
  uint64_t documents = 0, tokens = 0, trained = 0, skipped = 0, bytes = 0, shards = 0;
};

Result<Totals> run(const TokenizeOptions& o) {
  uint64_t total_bytes = 0;
  for (const auto& in : o.inputs) {
    std::error_code ec;
    const uint64_t n = fs::file_size(in, ec);
    if (ec) return invalid_argument("input '" + in + "': " + ec.message());
    total_bytes += n;
  }
  MT_ASSIGN_OR_RETURN(std::shared_ptr<const Tokenizer> tok, open_tokenizer(o.tokenizer));
  MT_ASSIGN_OR_RETURN(LineFormat fmt, make_line_format(tok, o.tokenizer, o.format, o.chat_template));
  MT_ASSIGN_OR_RETURN(const std::string tokenization, tokenization_fingerprint(*tok, fmt));
  MT_ASSIGN_OR_RETURN(ShardSetWriter writer,
                      ShardSetWriter::create(o.out, tok->vocab_size(), o.tokenizer, o.shard_tokens, tokenization));
  ThreadPool pool(o.threads);
  ByteProgress progress("tokenize", total_bytes);
  Totals t;
  auto sink = [&](TokenizedChunk& c) -> Status {
    for (const auto& ex : c.examples) MT_RETURN_IF_ERROR(writer.add(ex));
    t.skipped += c.skipped;
    t.bytes += c.bytes;
    progress.update(t.bytes, writer.tokens());
    return Status::Ok();
  };
  for (const auto& in : o.inputs)  // a line that does not format is bad data (exit 1), not a usage error
    if (Status s = tokenize_file(in, kind_of(in, o), fmt.format, pool, sink); !s.ok())
      return Status(s.code() == StatusCode::kInvalidArgument ? StatusCode::kDataLoss : s.code(), s.message());
  MT_RETURN_IF_ERROR(writer.finish());
  progress.finish(t.bytes, writer.tokens());
  t.documents = writer.documents(), t.tokens = writer.tokens(), t.trained = writer.trained_tokens();
  t.shards = writer.shards();
  return t;
}

}  // namespace

int cmd_tokenize(const Args& a) {
  auto o = parse(a);
  if (!o.ok()) return fail(kUsage, o.status().message() + "\nusage: megatrain " + command_usage("tokenize"));
  const auto t0 = std::chrono::steady_clock::now();
  auto t = run(*o);
  if (!t.ok()) {
    const StatusCode c = t.status().code();
    return fail(c == StatusCode::kInvalidArgument || c == StatusCode::kNotFound ? kUsage : kJobFailed,
                t.status().message());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Json summary = Json::object({{"documents", int64_t(t->documents)},
                                     {"tokens", int64_t(t->tokens)},
                                     {"trained_tokens", int64_t(t->trained)},
                                     {"skipped_empty", int64_t(t->skipped)},
                                     {"shards", int64_t(t->shards)},
                                     {"bytes", int64_t(t->bytes)},
                                     {"seconds", secs},
                                     {"tokens_per_second", secs > 0 ? double(t->tokens) / secs : 0},
                                     {"out", o->out}});
  if (a.json()) {
    print_json(summary);
  } else {
    std::printf("%llu documents, %llu tokens (%llu trained on) in %llu shards under %s; %.1f s, %.0f tokens/s\n",
                (unsigned long long)t->documents, (unsigned long long)t->tokens, (unsigned long long)t->trained,
                (unsigned long long)t->shards, o->out.c_str(), secs, secs > 0 ? double(t->tokens) / secs : 0);
  }
  return kOk;
}

}  // namespace mt::cli

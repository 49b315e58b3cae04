// megatrain-bench tokenize: encode throughput of a tokenizer.json (load_tokenizer) on a corpus
// file, one document per line, split across --threads threads; scripts/bench_tokenizer.sh runs
// Hugging Face `tokenizers` on the same corpus for the comparison in docs/PERF.md.
#include <cstdio>
#include <thread>

#include "bench/bench.h"
#include "engine/text/tokenizer.h"

namespace mt::bench {

namespace {

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    if (nl == std::string_view::npos) nl = text.size();
    lines.push_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  return lines;
}

// Encodes lines [begin, end) per thread, chunks balanced by bytes; returns tokens or an error.
Result<size_t> encode_all(const Tokenizer& tok, const std::vector<std::string_view>& lines, int threads) {
  std::vector<size_t> bounds{0};
  size_t total = 0;
  for (auto l : lines) total += l.size() + 1;
  size_t acc = 0;
  for (size_t i = 0; i < lines.size() && int(bounds.size()) < threads; ++i) {
    acc += lines[i].size() + 1;
    if (acc * size_t(threads) >= total * bounds.size()) bounds.push_back(i + 1);
  }
  bounds.push_back(lines.size());
  std::vector<size_t> tokens(bounds.size(), 0);
  std::vector<Status> status(bounds.size());
  std::vector<std::thread> pool;
  for (size_t t = 0; t + 1 < bounds.size(); ++t)
    pool.emplace_back([&, t] {
      std::vector<int32_t> ids;
      for (size_t i = bounds[t]; i < bounds[t + 1] && status[t].ok(); ++i) {
        ids.clear();
        status[t] = tok.encode(lines[i], ids);
        tokens[t] += ids.size();
      }
    });
  for (auto& th : pool) th.join();
  size_t n = 0;
  for (size_t t = 0; t < bounds.size(); ++t) {
    if (!status[t].ok()) return status[t];
    n += tokens[t];
  }
  return n;
}

}  // namespace

int run_tokenize(const Flags& f) {
  const std::string dir = f.str("tokenizer", "");
  const std::string corpus_path = f.str("corpus", "");
  auto threads = f.num("threads", 1);
  auto reps = f.num("reps", 3);
  Status s = f.check_all_used();
  if (s.ok() && (dir.empty() || corpus_path.empty())) s = invalid_argument("--tokenizer DIR and --corpus FILE are required");
  if (s.ok() && (!threads.ok() || !reps.ok())) s = !threads.ok() ? threads.status() : reps.status();
  if (s.ok() && (*threads < 1 || *threads > 256 || *reps < 1)) s = invalid_argument("--threads in [1, 256], --reps >= 1");
  if (!s.ok()) {
    std::fprintf(stderr, "megatrain-bench tokenize: %s\n", s.message().c_str());
    return 2;
  }
  auto tok = load_tokenizer(dir);
  auto corpus = read_file(corpus_path);
  if (!tok.ok() || !corpus.ok()) {
    std::fprintf(stderr, "megatrain-bench tokenize: %s\n",
                 (!tok.ok() ? tok.status() : corpus.status()).to_string().c_str());
    return 1;
  }
  const std::vector<std::string_view> lines = split_lines(*corpus);
  Result<size_t> tokens = size_t(0);
  const double sec = median_seconds(int(*reps), [&] { tokens = encode_all(**tok, lines, int(*threads)); });
  if (!tokens.ok()) {
    std::fprintf(stderr, "megatrain-bench tokenize: %s\n", tokens.status().to_string().c_str());
    return 1;
  }
  emit(Json::object({{"suite", "tokenize"},
                     {"tokenizer", (*tok)->describe()},
                     {"threads", int64_t(*threads)},
                     {"documents", int64_t(lines.size())},
                     {"bytes", int64_t(corpus->size())},
                     {"tokens", int64_t(*tokens)},
                     {"seconds", sec},
                     {"tokens_per_s", double(*tokens) / sec},
                     {"mb_per_s", double(corpus->size()) / sec / 1e6}}),
       f.json());
  return 0;
}

}  // namespace mt::bench

// Tokenizing files of examples: jsonl (one example per line) and plain text (one document per
// file, or one per blank-line-separated paragraph), read in bounded chunks and formatted on a
// thread pool, delivered in file order. `megatrain tokenize` writes what this yields to shards;
// `data.source: jsonl` keeps it in memory for a job.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/base/status.h"
#include "engine/base/thread_pool.h"
#include "engine/data/example_set.h"
#include "engine/text/example.h"

namespace mt {

enum class InputKind { kJsonl, kTextFile, kTextParagraphs };

// What makes one example of a jsonl line, and of a plain-text document (ExampleFormatter's format
// and format_document); both thread-safe.
struct LineFormatter {
  std::function<Result<TokenizedExample>(std::string_view json_line)> line;
  std::function<Result<TokenizedExample>(std::string_view text)> document;
};

struct TokenizedChunk {
  std::vector<TokenizedExample> examples;  // in file order, empty examples dropped
  uint64_t bytes = 0;                      // input bytes this chunk consumed
  uint64_t skipped = 0;                    // examples that tokenized to nothing
};

// Reads `path` in chunks of about `chunk_bytes`, formats each chunk's examples on `pool` and
// passes each chunk to `sink` in order. A line that fails to format is an error naming
// path:line. A text file read as one document is read whole. A file of more than max_bytes is
// refused, by its size before reading and while reading if it grows (so nothing, not even one
// line, is held beyond that).
inline constexpr uint64_t kNoByteLimit = ~uint64_t(0);
Status tokenize_file(const std::string& path, InputKind kind, const LineFormatter& format, ThreadPool& pool,
                     const std::function<Status(TokenizedChunk&)>& sink, size_t chunk_bytes = size_t(16) << 20,
                     uint64_t max_bytes = kNoByteLimit);

// data.source jsonl: the whole file tokenized into memory before training starts (so the step
// loop never waits on a tokenizer). Files over kMaxJsonlBytes are refused: tokenize those to
// shards with `megatrain tokenize`.
inline constexpr uint64_t kMaxJsonlBytes = uint64_t(256) << 20;
// `tokenizer`: what tokenized it, named in the set's description (the job's log).
Result<std::unique_ptr<ExampleSet>> tokenize_jsonl(const std::string& path, const LineFormatter& format, int threads,
                                                   const std::string& tokenizer);

}  // namespace mt

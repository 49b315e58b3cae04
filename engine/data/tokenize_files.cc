// Chunked, parallel tokenization of jsonl and text files.
#include "engine/data/tokenize_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/base/confined_open.h"
#include "engine/base/json.h"  // read_file

namespace mt {

namespace {

// The lines of an open file, without their '\n' (NUL bytes kept), reading at most max_bytes of it
// in all: a file that grew past its checked size ends the reading with EFBIG, and a line longer
// than kMaxExampleLineBytes (which no example may come from) with E2BIG, so no buffer grows
// without bound.
class LineReader {
 public:
  LineReader(OwnedFd fd, uint64_t max_bytes) : fd_(std::move(fd)), left_(max_bytes) {}

  bool next(std::string& line) {
    line.clear();
    for (bool any = false;;) {
      if (at_ == end_ && !fill()) return any && !error_;
      any = true;
      const char* from = buf_ + at_;
      const auto* nl = static_cast<const char*>(std::memchr(from, '\n', end_ - at_));
      const size_t n = nl ? size_t(nl - from) : end_ - at_;
      line.append(from, n);
      at_ += n + (nl ? 1 : 0);
      if (line.size() > kMaxExampleLineBytes) return error_ = E2BIG, false;
      if (nl) return true;
    }
  }
  int failed() const { return error_; }  // errno of a failed read (EFBIG, E2BIG: see above), 0 at the end

 private:
  bool fill() {
    at_ = end_ = 0;
    for (;;) {
      const ssize_t n = ::read(fd_.get(), buf_, sizeof buf_);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return error_ = errno ? errno : EIO, false;
      if (uint64_t(n) > left_) return error_ = EFBIG, false;
      left_ -= uint64_t(n);
      end_ = size_t(n);
      return n > 0;
    }
  }
  OwnedFd fd_;
  uint64_t left_;
  char buf_[1 << 16];
  size_t at_ = 0, end_ = 0;
  int error_ = 0;
};

Status too_large(const std::string& path, uint64_t bytes, uint64_t max_bytes) {
  return invalid_argument("data.path '" + path + "' has " + (bytes > max_bytes ? std::to_string(bytes) : "more than " + std::to_string(max_bytes)) +
                          " bytes, more than the " + std::to_string(max_bytes) +
                          " a job tokenizes into memory; tokenize it to shards (megatrain tokenize) and use "
                          "data.source: shards");
}

struct Unit {
  std::string text;  // a jsonl line, or a plain-text document
  uint64_t line_no = 0;  // where it starts
  bool document = false;
};

// Formats units on the pool in blocks; the first failure (in file order) is returned.
Status format_units(const std::string& path, std::vector<Unit>& units, const LineFormatter& format,
                    ThreadPool& pool, TokenizedChunk& chunk) {
  constexpr size_t kBlock = 64;
  std::vector<Result<TokenizedExample>> out(units.size(), Status(StatusCode::kInternal, "not formatted"));
  const int blocks = int((units.size() + kBlock - 1) / kBlock);
  pool.parallel_for(blocks, [&](int b) {
    for (size_t i = size_t(b) * kBlock; i < std::min(units.size(), size_t(b + 1) * kBlock); ++i)
      out[i] = units[i].document ? format.document(units[i].text) : format.line(units[i].text);
  });
  for (size_t i = 0; i < units.size(); ++i) {
    if (!out[i].ok()) return out[i].status().with_context(path + ":" + std::to_string(units[i].line_no));
    if (out[i]->ids.empty()) ++chunk.skipped;
    else chunk.examples.push_back(std::move(out[i]).value());
  }
  return Status::Ok();
}

Status emit(const std::string& path, std::vector<Unit>& units, uint64_t bytes, const LineFormatter& format,
            ThreadPool& pool, const std::function<Status(TokenizedChunk&)>& sink) {
  TokenizedChunk chunk;
  chunk.bytes = bytes;
  MT_RETURN_IF_ERROR(format_units(path, units, format, pool, chunk));
  units.clear();
  return sink(chunk);
}

}  // namespace

Status tokenize_file(const std::string& path, InputKind kind, const LineFormatter& format, ThreadPool& pool,
                     const std::function<Status(TokenizedChunk&)>& sink, size_t chunk_bytes, uint64_t max_bytes) {
  if (!(kind == InputKind::kJsonl ? bool(format.line) : bool(format.document)))  // else a pool worker would throw
    return internal_error("tokenize_file: no formatter for " + std::string(kind == InputKind::kJsonl ? "lines" : "documents"));
  std::vector<Unit> units;
  if (kind == InputKind::kTextFile) {
    MT_ASSIGN_OR_RETURN(const std::string text, read_data_file(path, std::min<uint64_t>(max_bytes, kMaxExampleLineBytes)));
    if (!text.empty()) units.push_back({text, 1, true});
    return emit(path, units, text.size(), format, pool, sink);
  }
  MT_ASSIGN_OR_RETURN(OwnedFd fd, open_regular_file("cannot open", path));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return data_loss("cannot stat '" + path + "': " + std::strerror(errno));
  if (uint64_t(st.st_size) > max_bytes) return too_large(path, uint64_t(st.st_size), max_bytes);
  LineReader in(std::move(fd), max_bytes);
  uint64_t line_no = 0, bytes = 0, para_line = 0;
  std::string line, para;
  auto flush_para = [&] {
    if (!para.empty()) units.push_back({para, para_line, true});
    para.clear();
  };
  while (in.next(line)) {
    ++line_no;
    bytes += line.size() + 1;
    if (kind != InputKind::kJsonl && !line.empty() && line.back() == '\r') line.pop_back();  // CRLF text
    if (kind == InputKind::kJsonl) {
      if (line.find_first_not_of(" \t\r") != std::string::npos) units.push_back({line, line_no, false});
    } else if (line.find_first_not_of(" \t\r") == std::string::npos) {
      flush_para();
    } else {
      if (para.empty()) para_line = line_no;
      para += para.empty() ? line : "\n" + line;
      if (para.size() > kMaxExampleLineBytes) break;  // refused below
    }
    if (bytes >= chunk_bytes) {
      if (kind != InputKind::kJsonl && !para.empty()) continue;  // finish the paragraph first
      MT_RETURN_IF_ERROR(emit(path, units, bytes, format, pool, sink));
      bytes = 0;
    }
  }
  if (in.failed() == EFBIG) return too_large(path, 0, max_bytes);  // it grew since the check above
  if (in.failed() == E2BIG || para.size() > kMaxExampleLineBytes)
    return invalid_argument(path + ":" + std::to_string(para.empty() ? line_no + 1 : para_line) + ": " +
                            (para.empty() ? "the line" : "the paragraph") + " is more than " +
                            std::to_string(kMaxExampleLineBytes) + " bytes, the most an example may come from");
  if (in.failed()) return data_loss("reading '" + path + "' failed: " + std::strerror(in.failed()));
  flush_para();
  return emit(path, units, bytes, format, pool, sink);
}

Result<std::unique_ptr<ExampleSet>> tokenize_jsonl(const std::string& path, const LineFormatter& format, int threads,
                                                   const std::string& tokenizer) {
  ThreadPool pool(threads);
  std::vector<TokenizedExample> all;
  MT_RETURN_IF_ERROR(tokenize_file(path, InputKind::kJsonl, format, pool, [&](TokenizedChunk& c) {
    for (auto& e : c.examples) all.push_back(std::move(e));
    return Status::Ok();
  }, size_t(16) << 20, kMaxJsonlBytes));
  const size_t n = all.size();
  return make_memory_example_set(std::move(all),
                                 "jsonl '" + path + "' (" + std::to_string(n) + " examples, tokenizer " + tokenizer + ")");
}

}  // namespace mt

// push ID FILE --format tokens-u16|tokens-u32|text: streams a token file to a `data: {source:
// push}` job in chunks (client streaming), with progress on stderr; prints what was accepted.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "client/remote/commands.h"

namespace mt::cli {

namespace {

// Bytes per token of a --format; 1 for text (the byte-level tokenizer: token = byte).
Result<int> token_bytes(const std::string& format) {
  if (format == "tokens-u16" || format == "uint16") return 2;
  if (format == "tokens-u32" || format == "uint32") return 4;
  if (format == "text") return 1;
  return invalid_argument("--format = '" + format + "': use tokens-u16, tokens-u32 or text");
}

// Little-endian tokens of `elem` bytes each (elem 1: bytes of text).
void decode(const std::vector<char>& raw, size_t n, int elem, v1::PushDataRequest& out) {
  out.mutable_tokens()->Reserve(int(n));
  const auto* p = reinterpret_cast<const unsigned char*>(raw.data());
  for (size_t i = 0; i < n; ++i, p += elem) {
    uint32_t t = 0;
    for (int b = elem - 1; b >= 0; --b) t = (t << 8) | p[b];
    out.add_tokens(t);
  }
}

class PushMeter {
 public:
  PushMeter(std::string file, uint64_t total) : file_(std::move(file)), total_(total), tty_(isatty(STDERR_FILENO)) {}
  void update(uint64_t sent, bool last) {
    const auto now = std::chrono::steady_clock::now();
    if (!last && now - shown_ < std::chrono::milliseconds(tty_ ? 200 : 2000)) return;
    shown_ = now;
    const double pct = total_ ? 100.0 * double(sent) / double(total_) : 100.0;
    std::fprintf(stderr, "%spushing %s: %llu/%llu tokens (%.0f%%)%s", tty_ ? "\r\033[K" : "", file_.c_str(),
                 (unsigned long long)sent, (unsigned long long)total_, pct, tty_ && !last ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  std::string file_;
  uint64_t total_;
  bool tty_;
  std::chrono::steady_clock::time_point shown_{};
};

}  // namespace

int remote_push(Connection& c, const Args& a) {
  if (a.positional().size() != 2)
    return fail(kUsage, "usage: megatrain push ID FILE --format tokens-u16|tokens-u32|text [--chunk-tokens N] [--json]");
  const std::string id = a.positional()[0], path = a.positional()[1];
  auto elem = token_bytes(a.get("format", "tokens-u16"));
  auto chunk_tokens = a.number("chunk-tokens", 16384);
  if (!elem.ok()) return fail(kUsage, elem.status().message());
  if (!chunk_tokens.ok() || *chunk_tokens < 1 || *chunk_tokens > 1e6)
    return fail(kUsage, "--chunk-tokens must be a number in [1, 1000000]");
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  if (ec || !in) return fail(kUsage, "cannot read '" + path + "'" + (ec ? ": " + ec.message() : ""));
  if (size % uint64_t(*elem))
    return fail(kUsage, "'" + path + "' has " + std::to_string(size) + " bytes, not a whole number of " +
                            std::to_string(*elem) + "-byte tokens");

  v1::PushDataResponse resp;
  auto ctx = c.context(0);
  auto writer = c.stub().PushData(ctx.get(), &resp);
  PushMeter meter(path, size / uint64_t(*elem));
  std::vector<char> raw(size_t(*chunk_tokens) * size_t(*elem));
  uint64_t sent = 0;
  bool first = true;
  while (in) {
    in.read(raw.data(), std::streamsize(raw.size()));
    const size_t n = size_t(in.gcount()) / size_t(*elem);
    if (n == 0) break;
    v1::PushDataRequest chunk;
    if (first) chunk.set_job_id(id);  // the first chunk names the job
    first = false;
    decode(raw, n, *elem, chunk);
    if (!writer->Write(chunk)) break;  // the server ended the stream; Finish says why
    sent += n;
    meter.update(sent, false);
  }
  if (first) {  // an empty file: name the job anyway so the daemon checks it
    v1::PushDataRequest chunk;
    chunk.set_job_id(id);
    writer->Write(chunk);
  }
  writer->WritesDone();
  if (grpc::Status s = writer->Finish(); !s.ok()) return c.fail(s, "push " + path + " to job " + id);
  meter.update(sent, true);
  if (a.json())
    print_json(Json::object({{"id", id},
                             {"file", path},
                             {"chunks_accepted", int64_t(resp.chunks_accepted())},
                             {"tokens_accepted", int64_t(resp.tokens_accepted())},
                             {"spooled_tokens", int64_t(resp.spooled_tokens())}}));
  else
    std::printf("job %s: accepted %llu tokens in %llu chunks (%llu tokens spooled in all)\n", id.c_str(),
                (unsigned long long)resp.tokens_accepted(), (unsigned long long)resp.chunks_accepted(),
                (unsigned long long)resp.spooled_tokens());
  return kOk;
}

}  // namespace mt::cli

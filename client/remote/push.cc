// push ID FILE --format tokens-u16|tokens-u32|text [--push-id ID]: streams a token file to a
// `data: {source: push}` job in chunks (client streaming), exactly once under retry (see
// remote_push), with progress on stderr; prints what was accepted.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "client/remote/commands.h"
#include "engine/base/hash.h"

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

// Progress on stderr. While streaming it counts tokens sent, which the daemon has not confirmed
// yet, so it never shows 100% then; only the daemon's answer completes it.
class PushMeter {
 public:
  PushMeter(std::string file, uint64_t total) : file_(std::move(file)), total_(total), tty_(isatty(STDERR_FILENO)) {}
  void sent(uint64_t n) {
    const auto now = std::chrono::steady_clock::now();
    if (now - shown_ < std::chrono::milliseconds(tty_ ? 200 : 2000)) return;
    shown_ = now;
    const double pct = std::min(99.0, total_ ? 100.0 * double(n) / double(total_) : 0.0);
    show("sent", n, pct, false);
  }
  void acknowledged(uint64_t n) { show("spooled", n, total_ ? 100.0 * double(n) / double(total_) : 100.0, true); }

 private:
  void show(const char* what, uint64_t n, double pct, bool last) {
    std::fprintf(stderr, "%spushing %s: %s %llu/%llu tokens (%.0f%%)%s", tty_ ? "\r\033[K" : "", file_.c_str(), what,
                 (unsigned long long)n, (unsigned long long)total_, std::floor(pct), tty_ && !last ? "" : "\n");
    std::fflush(stderr);
  }
  std::string file_;
  uint64_t total_;
  bool tty_;
  std::chrono::steady_clock::time_point shown_{};
};

// The default push id: the same for the same job, unchanged file (path, size, mtime) and format,
// so running a failed or interrupted push again resumes it instead of spooling its tokens twice.
// The format is part of it: the same bytes read as other tokens are another push, never the rest
// of this one (a tokens-u32 push resumed as u16 appended the file's second half as other ids).
std::string default_push_id(const std::string& job, const std::string& path, uint64_t size, int elem) {
  std::error_code ec;
  const std::string abs = std::filesystem::weakly_canonical(path, ec).string();
  const auto mtime = std::filesystem::last_write_time(path, ec).time_since_epoch().count();
  const std::string what = job + '\0' + abs + '\0' + std::to_string(size) + '\0' + std::to_string(mtime) +
                           (elem == 2 ? "" : '\0' + std::to_string(elem));  // u16's ids as before
  return "file-" + hex64(fnv1a64(what));
}

struct PushPlan {
  std::string id, path, push_id;
  int elem = 2;
  size_t chunk_tokens = 0;
  uint64_t total = 0;  // tokens in the file
};

// How many of the push's tokens the daemon holds (resp.push_committed_tokens; and the job's whole
// spool, resp.spooled_tokens): a stream of one empty chunk naming it.
grpc::Status probe_push(Connection& c, const PushPlan& p, v1::PushDataResponse& resp) {
  auto ctx = c.context();
  auto writer = c.stub().PushData(ctx.get(), &resp);
  v1::PushDataRequest probe;
  probe.set_job_id(p.id);
  probe.set_push_id(p.push_id);
  writer->Write(probe);
  writer->WritesDone();
  return writer->Finish();
}

// Streams the file's tokens from token `from` on, each chunk at its offset in the push.
grpc::Status stream_from(Connection& c, const PushPlan& p, uint64_t from, v1::PushDataResponse& resp) {
  std::ifstream in(p.path, std::ios::binary);
  in.seekg(std::streamoff(from * uint64_t(p.elem)));
  auto ctx = c.context(0);
  auto writer = c.stub().PushData(ctx.get(), &resp);
  PushMeter meter(p.path, p.total);
  std::vector<char> raw(p.chunk_tokens * size_t(p.elem));
  uint64_t at = from;
  while (in) {
    in.read(raw.data(), std::streamsize(raw.size()));
    const size_t n = size_t(in.gcount()) / size_t(p.elem);
    if (n == 0) break;
    v1::PushDataRequest chunk;
    if (at == from) {  // the first chunk names the job and the push
      chunk.set_job_id(p.id);
      chunk.set_push_id(p.push_id);
    }
    chunk.set_offset(at);
    decode(raw, n, p.elem, chunk);
    if (!writer->Write(chunk)) break;  // the server ended the stream; Finish says why
    at += n;
    meter.sent(at);
  }
  writer->WritesDone();
  grpc::Status s = writer->Finish();
  if (s.ok()) meter.acknowledged(resp.push_committed_tokens());
  return s;
}

// A failed push: what the daemon holds of it and how to go on.
int push_failed(Connection& c, const PushPlan& p, const grpc::Status& s) {
  v1::PushDataResponse probe;
  std::string held;
  Json details = Json::object({{"id", p.id}, {"file", p.path}, {"push_id", p.push_id}, {"total_tokens", int64_t(p.total)}});
  if (probe_push(c, p, probe).ok()) {
    const uint64_t have = probe.push_committed_tokens();
    held = " (" + std::to_string(have) + " of its " + std::to_string(p.total) + " tokens are spooled";
    details.set("push_committed_tokens", int64_t(have));
  } else {
    held = " (how much is spooled is unknown";
    details.set("push_committed_tokens", nullptr);
  }
  // A refused chunk is refused again as it is; a corrected file has another default id, which
  // would spool its first tokens a second time.
  const bool refused = s.error_code() == grpc::StatusCode::INVALID_ARGUMENT;
  held += refused ? "; the file's tokens are refused as they are: correct them and add --push-id " + p.push_id +
                        " to resume this push, not start another)"
                  : "; run the same command again to resume push " + p.push_id + ")";
  return c.fail(s, "push " + p.path + " to job " + p.id + held, details);
}

void print_result(const Args& a, const PushPlan& p, const v1::PushDataResponse& resp, uint64_t resumed_at) {
  if (a.json()) {
    print_json(Json::object({{"id", p.id},
                             {"file", p.path},
                             {"push_id", p.push_id},
                             {"resumed_at", int64_t(resumed_at)},
                             {"chunks_accepted", int64_t(resp.chunks_accepted())},
                             {"tokens_accepted", int64_t(resp.tokens_accepted())},
                             {"push_committed_tokens", int64_t(resp.push_committed_tokens())},
                             {"spooled_tokens", int64_t(resp.spooled_tokens())}}));
    return;
  }
  std::printf("job %s: accepted %llu tokens in %llu chunks (%llu tokens spooled in all)", p.id.c_str(),
              (unsigned long long)resp.tokens_accepted(), (unsigned long long)resp.chunks_accepted(),
              (unsigned long long)resp.spooled_tokens());
  if (resumed_at && resp.tokens_accepted()) std::printf("; push %s resumed at token %llu", p.push_id.c_str(), (unsigned long long)resumed_at);
  std::printf("\n");
}

Result<PushPlan> plan_push(const Args& a) {
  if (a.positional().size() != 2)
    return invalid_argument(
        "usage: megatrain push ID FILE --format tokens-u16|tokens-u32|text [--chunk-tokens N] [--push-id ID] [--json]");
  PushPlan p;
  p.id = a.positional()[0], p.path = a.positional()[1];
  if (!a.has("format"))  // no default: a retry that left it out would read the file as other tokens
    return invalid_argument("push needs --format tokens-u16|tokens-u32|text: how the file's bytes are tokens");
  MT_ASSIGN_OR_RETURN(p.elem, token_bytes(a.get("format", "")));
  MT_ASSIGN_OR_RETURN(const int64_t chunk_tokens, a.integer("chunk-tokens", 16384, 1, 1000000));
  p.chunk_tokens = size_t(chunk_tokens);
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(p.path, ec);
  if (ec || !std::ifstream(p.path, std::ios::binary))
    return invalid_argument("cannot read '" + p.path + "'" + (ec ? ": " + ec.message() : ""));
  if (size % uint64_t(p.elem))
    return invalid_argument("'" + p.path + "' has " + std::to_string(size) + " bytes, not a whole number of " +
                            std::to_string(p.elem) + "-byte tokens");
  p.total = size / uint64_t(p.elem);
  p.push_id = a.get("push-id", default_push_id(p.id, p.path, size, p.elem));
  return p;
}

}  // namespace

// Exactly once: the push carries an id (--push-id, or one derived from the job and the file), the
// daemon keeps how many of its tokens it has spooled, and this resumes from there.
int remote_push(Connection& c, const Args& a) {
  auto plan = plan_push(a);
  if (!plan.ok()) return fail(kUsage, plan.status().message());
  const PushPlan& p = *plan;
  v1::PushDataResponse resp;
  if (grpc::Status s = probe_push(c, p, resp); !s.ok()) return c.fail(s, "push " + p.path + " to job " + p.id);
  const uint64_t have = resp.push_committed_tokens();
  if (have == 0 && !a.has("push-id") && p.elem != 2) {  // a push a client before --format joined the id began?
    PushPlan legacy = p;
    legacy.push_id = default_push_id(p.id, p.path, p.total * uint64_t(p.elem), 2);
    v1::PushDataResponse old;
    if (probe_push(c, legacy, old).ok() && old.push_committed_tokens() > 0)
      return fail(kUsage, "push " + legacy.push_id + " of '" + p.path + "' (an earlier client's id for this file) holds " +
                              std::to_string(old.push_committed_tokens()) + " tokens: if it was pushed as " +
                              a.get("format") + ", give --push-id " + legacy.push_id +
                              " to resume it; --push-id NEW pushes the file again");
  }
  if (have > p.total)
    return fail(kUsage, "push " + p.push_id + " already holds " + std::to_string(have) + " tokens, more than the " +
                            std::to_string(p.total) + " of '" + p.path + "': give another --push-id");
  if (have == p.total) {  // done before (or an empty file): nothing to send; the probe's reply tells the spool
    resp.set_chunks_accepted(0);  // its one empty chunk carried no tokens
    if (p.total && !a.json())
      std::fprintf(stderr,
                   "push %s of '%s' is complete: all %llu tokens were spooled before (--push-id NEW pushes the "
                   "file again)\n",
                   p.push_id.c_str(), p.path.c_str(), (unsigned long long)p.total);
    print_result(a, p, resp, have);
    return kOk;
  }
  v1::PushDataResponse sent;
  if (grpc::Status s = stream_from(c, p, have, sent); !s.ok()) return push_failed(c, p, s);
  print_result(a, p, sent, have);
  return kOk;
}

}  // namespace mt::cli

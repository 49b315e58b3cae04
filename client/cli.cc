#include "client/cli.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>

#include "engine/base/byte_size.h"
#include "engine/exec/planner.h"

namespace mt::cli {

Result<Args> Args::parse(int argc, char** argv, int first, const std::vector<std::string>& switches) {
  Args a;
  for (int i = first; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) != 0) {
      a.pos_.push_back(s);
      continue;
    }
    std::string key = s.substr(2), value;
    if (auto eq = key.find('='); eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    } else if (std::find(switches.begin(), switches.end(), key) == switches.end()) {
      // No value: the last argument, or followed by a flag (`--out --json` would train into a
      // directory named "--json": a value that looks like a flag is written --out=--json). Told
      // once the command's flags are known, so an unknown flag is named as that first.
      if (i + 1 >= argc || std::string(argv[i + 1]).rfind("--", 0) == 0) {
        if (a.dangling_.empty())
          a.dangling_ = i + 1 >= argc ? "flag --" + key + " needs a value"
                                      : "flag --" + key + " needs a value, not the flag " + argv[i + 1] + " (write --" +
                                            key + "=" + argv[i + 1] + " if that is the value)";
        a.flags_[key] = "";
        continue;
      }
      value = argv[++i];
    }
    if (a.flags_.count(key))  // `--out a --out b` wrote to b, silently
      return invalid_argument("flag --" + key + " is given twice");
    a.flags_[key] = value;
  }
  return a;
}

std::string Args::get(const std::string& k, const std::string& def) const {
  auto it = flags_.find(k);
  return it == flags_.end() ? def : it->second;
}

Result<uint64_t> Args::size(const std::string& k, uint64_t def) const {
  auto it = flags_.find(k);
  if (it == flags_.end()) return def;
  auto bytes = parse_byte_size(it->second);
  if (!bytes.ok()) return invalid_argument("--" + k + " = " + bytes.status().message());
  return bytes;
}

Result<int64_t> Args::integer(const std::string& k, int64_t def, int64_t min, int64_t max) const {
  auto it = flags_.find(k);
  if (it == flags_.end()) return def;
  const std::string& text = it->second;
  auto refuse = [&] {
    return invalid_argument("--" + k + " = '" + text + "' must be a decimal integer from " + std::to_string(min) +
                            " to " + std::to_string(max));
  };
  const bool negative = !text.empty() && text[0] == '-';
  const std::string digits = text.substr(negative ? 1 : 0);
  if (digits.empty() || digits.size() > 19 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return refuse();
  const uint64_t magnitude = std::stoull(digits);  // 19 digits fit in uint64
  if (magnitude > uint64_t(INT64_MAX)) return refuse();
  const int64_t v = negative ? -int64_t(magnitude) : int64_t(magnitude);
  if (v < min || v > max) return refuse();
  return v;
}

Result<double> Args::number(const std::string& k, double def, double min, double max) const {
  auto it = flags_.find(k);
  if (it == flags_.end()) return def;
  const std::string& text = it->second;
  const auto parsed = Json::parse_number(text);  // the spec's numbers' rule: no hex, inf, nan, spaces, suffix
  const double v = parsed.ok() ? parsed->as_double() : 0;
  if (!parsed.ok() || !(v > min) || v > max) {
    char range[64];
    std::snprintf(range, sizeof range, "above %g and at most %g", min, max);
    return invalid_argument("--" + k + " = '" + text + "' must be a decimal number " + range);
  }
  return v;
}

const char* command_usage(const std::string& cmd) {
  static const std::map<std::string, const char*> kUsage = {
      {"train", "train SPEC [--out DIR] [--steps N] [--backend B] [--executor E] [--precision fp32|bf16|auto] [--devices N] [--shard-optimizer] [--host-memory SIZE] [--json]"},
      {"plan", "plan SPEC [--seq-len T | --max-seq-len] [--host-memory SIZE] [--device-memory SIZE] [--processes R [--shard-optimizer]] [--offload nvme [--nvme-paths A,B] [--nvme-masters] [--nvme-grad-window N] [--nvme-gbps G] [--device-tflops F]] [--server ADDR] [--json]"},
      {"eval", "eval --model DIR --data FILE [--format text|uint16|uint32|llmc] [--seq-len 256] [--max-seqs N] [--eod-id N] [--json]"},
      {"inspect", "inspect PATH [--json]"},
      {"tokenize", "tokenize INPUT... --tokenizer DIR|byte --out DIR [--format auto|text|prompt_completion|messages]\n"
                   "       [--chat-template NAME] [--text-split file|blank-lines] [--threads N] [--shard-tokens N] [--json]"},
      {"export", "export CHECKPOINT OUT_DIR [--dtype bf16|fp32] [--shard-size 5GB] [--overwrite] [--json]\n"
                 "       megatrain export --remote ID OUT_DIR [--step N] [--dtype bf16|fp32] [--overwrite] [--json]"},
      {"logs", "logs ID|daemon [-f|--follow] [--tail N] [--since 2026-11-30T16:05:01Z|10m|2h|UNIX_MS] [--json]"},
      {"checkpoints", "checkpoints ID [--json]"},
      {"submit", "submit SPEC [--priority N] [--watch] [--json]"},
      {"list", "list [--state STATE] [--name SUBSTRING] [--json]"},
      {"pause", "pause ID [--json]"},
      {"resume", "resume ID [--json]"},
      {"delete", "delete ID [--keep-checkpoints] [--json]"},
      {"status", "status ID [--json]"},
      {"watch", "watch ID [--from-start] [--json]"},
      {"cancel", "cancel ID [--json]"},
      {"checkpoint", "checkpoint ID [--json]"},
      {"push", "push ID FILE --format tokens-u16|tokens-u32|text [--chunk-tokens N] [--push-id ID] [--json]"},
  };
  auto it = kUsage.find(cmd);
  return it == kUsage.end() ? nullptr : it->second;
}

Status check_flags(const std::string& cmd, const Args& a) {
  const char* usage = command_usage(cmd);
  if (!usage) return Status::Ok();  // an unknown command is refused by name elsewhere
  std::set<std::string> known = {"json"};  // every --NAME of the usage line
  for (const char* p = std::strstr(usage, "--"); p; p = std::strstr(p, "--")) {
    const char* end = p += 2;
    while (std::isalnum(static_cast<unsigned char>(*end)) || *end == '-') ++end;
    known.emplace(p, end);
  }
  // A daemon's address and credentials, for the commands that talk to one (flags or environment).
  if (cmd != "train" && cmd != "eval" && cmd != "inspect" && cmd != "tokenize") known.insert({"server", "tls-ca", "token-file"});
  for (const auto& [flag, value] : a.flags())
    if (!known.count(flag)) return invalid_argument("unknown flag --" + flag + " for '" + cmd + "'");
  if (!a.dangling().empty()) return invalid_argument(a.dangling());
  return Status::Ok();
}

bool wants_help(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") return true;
  return false;
}

int usage_error(const std::string& cmd) {
  const char* u = command_usage(cmd);
  return fail(kUsage, std::string("usage: megatrain ") + (u ? u : cmd));
}

namespace {
bool json_errors = false;

const char* exit_code_name(int code) {
  return code == kUsage ? "USAGE" : code == kUnreachable ? "UNREACHABLE" : code == kJobFailed ? "FAILED" : "OK";
}
}  // namespace

void report_errors_as_json(bool on) { json_errors = on; }

int fail(int code, const std::string& message, const Json& details) {
  std::fprintf(stderr, "megatrain: %s\n", message.c_str());
  if (json_errors) {
    Json j = Json::object({{"event", "error"}, {"exit_code", code}, {"code", exit_code_name(code)}, {"message", message}});
    if (details.is_object())
      for (const auto& [k, v] : details.members()) j.set(k, v);
    print_json(j);
  }
  return code;
}

void print_json(const Json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

void print_nvme_plan(int paths, bool masters, int window, uint64_t drive_bytes, uint64_t per_path, uint64_t window_bytes,
                     const std::string& verdict) {
  std::printf("nvme tier      %s on the drives (%s, %d path%s, %s on the fullest); a window of %d units, %s of host memory\n",
              format_bytes(drive_bytes).c_str(), masters ? "Adam moments and fp32 masters" : "Adam moments", paths,
              paths == 1 ? "" : "s", format_bytes(per_path).c_str(), window, format_bytes(window_bytes).c_str());
  std::printf("nvme I/O       %s\n", verdict.c_str());
}

}  // namespace mt::cli

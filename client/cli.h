// Shared pieces of the `megatrain` CLI: argument parsing, exit codes, output.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "engine/base/json.h"
#include "engine/base/status.h"

namespace mt::cli {

// Exit codes, listed in --help.
enum ExitCode { kOk = 0, kJobFailed = 1, kUsage = 2, kUnreachable = 3 };

// Positional arguments and --flag value / --switch options after the command name.
class Args {
 public:
  // `switches` are flags that take no value (e.g. "json", "watch").
  static Result<Args> parse(int argc, char** argv, int first, const std::vector<std::string>& switches);
  const std::vector<std::string>& positional() const { return pos_; }
  bool has(const std::string& k) const { return flags_.count(k) > 0; }
  std::string get(const std::string& k, const std::string& def = "") const;
  // --k as a decimal integer in [min, max] (`def` when absent): digits with an optional leading
  // '-', nothing else (no spaces, no '+', no 0x, no exponent), as the spec parser reads integers.
  Result<int64_t> integer(const std::string& k, int64_t def, int64_t min, int64_t max) const;
  // --k as a finite decimal number in (min, max] (`def` when absent), read as a spec's numbers
  // are (Json::parse_number: 2.5, 1e3; no spaces, 0x, inf, nan or suffixes).
  Result<double> number(const std::string& k, double def, double min, double max) const;
  // --k as a size in bytes (engine/base/byte_size's rule: 4096, 512M, 128GiB, 1.5TB), `def` when
  // absent; refused naming the flag.
  Result<uint64_t> size(const std::string& k, uint64_t def) const;
  bool json() const { return has("json"); }
  const std::map<std::string, std::string>& flags() const { return flags_; }
  // Why a flag that needs a value has none ("": every one has); check_flags refuses it once it
  // knows the flag exists.
  const std::string& dangling() const { return dangling_; }

 private:
  std::vector<std::string> pos_;
  std::map<std::string, std::string> flags_;
  std::string dangling_;
};

// The usage line of a command ("train SPEC [--out DIR] ..."), or nullptr for an unknown one.
// `megatrain CMD --help` (or -h) prints it and exits 0; a usage error prints it and exits 2.
const char* command_usage(const std::string& cmd);
bool wants_help(int argc, char** argv, int first);  // --help or -h among the arguments
// A flag the command's usage line does not name (a typo: --step for --steps, --output for --out)
// is refused naming it, instead of being ignored while the command does something else.
Status check_flags(const std::string& cmd, const Args& a);
int usage_error(const std::string& cmd);             // "usage: megatrain ..." on stderr, kUsage

// Prints an error ("megatrain: ..." on stderr) and returns the exit code. With --json
// (report_errors_as_json) also one object on stdout: {"event": "error", "exit_code": N,
// "code": ..., "message": ...} and the members of `details` (e.g. what a push had spooled).
int fail(int code, const std::string& message, const Json& details = Json::object());
void report_errors_as_json(bool on);
// One JSON object on one line, flushed.
void print_json(const Json& j);
// The NVMe tier's lines of a plan (local and the server's).
void print_nvme_plan(int paths, bool masters, int window, uint64_t drive_bytes, uint64_t per_path, uint64_t window_bytes,
                     const std::string& verdict);

// Local commands (link the engine, need no daemon).
int cmd_train(const Args& a);
int cmd_plan_local(const Args& a);
int cmd_eval(const Args& a);
int cmd_inspect(const Args& a);
int cmd_export(const Args& a);
int cmd_tokenize(const Args& a);

}  // namespace mt::cli

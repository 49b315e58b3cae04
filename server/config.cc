#include "server/config.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "engine/base/address.h"
#include "engine/base/byte_size.h"
#include "engine/base/host_memory.h"
#include "engine/job/job.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

ABSL_FLAG(std::string, config, "", "Config file of `flag: value` lines (command-line flags win)");
ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "gRPC listen address; non-loopback needs TLS + token or --insecure");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9464", "Prometheus /metrics listen address (empty: off)");
ABSL_FLAG(std::string, state_dir, "", "State directory (default: $XDG_STATE_HOME/megatrain)");
ABSL_FLAG(std::string, data_root, "", "Root every path in a job spec resolves under (default: STATE_DIR/data)");
ABSL_FLAG(std::string, nvme_paths, "",
          "Comma-separated directories on local drives where jobs' NVMe tiers (memory.offload = nvme) may put "
          "their scratch files; a job naming none uses them all");
ABSL_FLAG(std::string, host_memory, "", "Host memory budget for admission, e.g. 512G (default: 80% of RAM)");
ABSL_FLAG(std::string, device_memory, "",
          "Device memory budget for admission and for each job's executor, e.g. 80G (default: the GPU's free "
          "memory at start; the backend's own buffers are counted by the plan; unlimited on the CPU backend)");
ABSL_FLAG(std::string, tls_cert, "", "TLS certificate chain (PEM)");
ABSL_FLAG(std::string, tls_key, "", "TLS private key (PEM)");
ABSL_FLAG(std::string, auth_token_file, "", "File holding the bearer token clients must send");
ABSL_FLAG(bool, insecure, false, "Allow a non-loopback listen address without TLS and a token");
ABSL_FLAG(int32_t, max_message_bytes, 4 << 20, "Largest gRPC message accepted");
ABSL_FLAG(int32_t, max_streams, 1024, "Watches and log reads open at once, and pushes apart; more are refused");
ABSL_FLAG(double, shutdown_timeout, 30, "Seconds SIGTERM waits for the running job's checkpoint");
ABSL_FLAG(double, peak_flops, 0, "Peak FLOP/s of the compute device for MFU (0: estimate)");
ABSL_FLAG(std::string, log_level, "info", "debug | info | warning | error");
ABSL_FLAG(int32_t, devices, 1,
          "Devices this daemon owns: a job may ask for up to this many (spec devices: N, data parallel over one "
          "host copy); CUDA devices 0..N-1, or N CPU devices");
ABSL_FLAG(int32_t, retain_jobs, 0,
          "Keep the newest N finished jobs and delete older ones with their files, at startup and as jobs finish "
          "(0: keep all)");
ABSL_FLAG(double, retain_days, 0, "Delete finished jobs (with their files) older than D days (0: keep all)");
ABSL_FLAG(std::string, log_file_bytes, "16M",
          "Rotation size of each log (a job's log.txt, daemon.log); at most twice this is kept on disk");

namespace mt::server {

std::string default_state_dir() {
  if (const char* s = std::getenv("STATE_DIRECTORY"); s && *s) return s;  // systemd StateDirectory=
  if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x) return std::string(x) + "/megatrain";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.local/state/megatrain";
}

Result<uint64_t> parse_size_flag(const std::string& flag, const std::string& text) {
  auto bytes = parse_byte_size(text);
  if (!bytes.ok()) return invalid_argument(flag + ": " + bytes.status().message());
  return bytes;
}

bool is_loopback_listen(const std::string& a) {
  if (a.rfind("unix:", 0) == 0) return true;
  std::string host = a.substr(0, a.rfind(':'));
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

Status check_listen_addresses(const DaemonConfig& c) {
  const bool unix_socket = c.listen.rfind("unix:", 0) == 0;
  if (unix_socket && c.listen.size() == 5) return invalid_argument("--listen = 'unix:' needs a socket path");
  if (!unix_socket) MT_RETURN_IF_ERROR(parse_host_port("--listen", c.listen, 0).status());
  if (!c.metrics_listen.empty()) MT_RETURN_IF_ERROR(parse_host_port("--metrics_listen", c.metrics_listen, 0).status());
  return Status::Ok();
}

Status finalize_config(DaemonConfig& c) {
  MT_RETURN_IF_ERROR(check_listen_addresses(c));
  if (c.state_dir.empty()) c.state_dir = default_state_dir();
  if (c.data_root.empty()) c.data_root = c.state_dir + "/data";
  if (c.host_memory == 0) c.host_memory = physical_memory_bytes() / 10 * 8;
  // a Job message with every path of a spec at PATH_MAX fits (ListJobs pages always hold one)
  if (c.max_message_bytes < (64 << 10)) return invalid_argument("--max_message_bytes must be >= 64K (65536)");
  if (c.max_streams < 1 || c.max_streams > 1000000)
    return invalid_argument("--max_streams = " + std::to_string(c.max_streams) + " must be in 1..1000000");
  if (c.devices < 1 || c.devices > 64) return invalid_argument("--devices = " + std::to_string(c.devices) + " must be in 1..64");
  if (c.retain_jobs < 0) return invalid_argument("--retain_jobs = " + std::to_string(c.retain_jobs) + " must be >= 0");
  if (!(c.retain_days >= 0) || c.retain_days > 1e6)
    return invalid_argument("--retain_days = " + std::to_string(c.retain_days) + " must be in 0..1e6");
  if (c.tls_cert.empty() != c.tls_key.empty()) return invalid_argument("--tls_cert and --tls_key go together");
  if (!is_loopback_listen(c.listen) && !c.insecure && (c.tls_cert.empty() || c.auth_token_file.empty()))
    return failed_precondition("--listen=" + c.listen +
                               " is not a loopback address: it needs --tls_cert/--tls_key and --auth_token_file, "
                               "or --insecure to accept unauthenticated plaintext connections");
  std::error_code ec;
  for (const std::string& dir : {c.state_dir, c.data_root}) {
    std::filesystem::create_directories(dir, ec);
    if (ec) return internal_error("cannot create '" + dir + "': " + ec.message());
  }
  c.state_dir = std::filesystem::canonical(c.state_dir).string();
  c.data_root = std::filesystem::canonical(c.data_root).string();
  // A spec may name anything under the data root, so the daemon's own records, checkpoints and
  // locks may not be there (an export with overwrite into STATE_DIR/jobs/ID; a symlink planted
  // where the daemon writes a lock, by whoever may write in the data root): the data root holds
  // neither the state directory nor lies in its jobs/ (the default, STATE_DIR/data, is fine).
  const auto within = [](const std::string& p, const std::string& dir) {
    return p == dir || p.rfind(dir == "/" ? dir : dir + "/", 0) == 0;
  };
  if (within(c.state_dir, c.data_root) || within(c.data_root, c.state_dir + "/jobs"))
    return invalid_argument("--data_root '" + c.data_root + "' and --state_dir '" + c.state_dir +
                            "' overlap where a job spec could name the daemon's own files (the state directory "
                            "inside the data root, or the data root in STATE_DIR/jobs); give them separate "
                            "directories (the default data root, STATE_DIR/data, is fine)");
  for (std::string& p : c.nvme_paths) {
    if (!std::filesystem::is_directory(p, ec)) return invalid_argument("--nvme_paths: '" + p + "' is not a directory");
    p = std::filesystem::canonical(p).string();
  }
  return Status::Ok();
}

namespace {

// Applies `name: value` lines (a YAML subset; '#' starts a comment) to the flags.
Status apply_config_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found("cannot read config file '" + path + "'");
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (auto h = line.find('#'); h != std::string::npos) line.resize(h);
    const auto colon = line.find_first_of(":=");
    auto trim = [](std::string s) {
      const auto b = s.find_first_not_of(" \t\r\"'"), e = s.find_last_not_of(" \t\r\"'");
      return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
    };
    if (trim(line).empty()) continue;
    if (colon == std::string::npos) return invalid_argument(path + ":" + std::to_string(n) + ": expected `flag: value`");
    std::string key = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
    for (char& ch : key) ch = ch == '-' ? '_' : ch;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(key);
    std::string err;
    if (!flag || key == "config") return invalid_argument(path + ":" + std::to_string(n) + ": unknown setting '" + key + "'");
    if (!flag->ParseFrom(value, &err))
      return invalid_argument(path + ":" + std::to_string(n) + ": " + key + " = '" + value + "': " + err);
  }
  return Status::Ok();
}

}  // namespace

Result<DaemonConfig> config_from_command_line(int argc, char** argv) {
  absl::SetProgramUsageMessage("megatraind: the MegaTrain training daemon (gRPC control plane + /metrics)");
  absl::FlagsUsageConfig usage;  // --help lists the daemon's flags (abseil's default: those of main.cc, none)
  usage.contains_help_flags = [](absl::string_view file) { return absl::StrContains(file, "server/config.cc"); };
  absl::SetFlagsUsageConfig(usage);
  for (int i = 1; i < argc; ++i) {  // the config file first, so the command line overrides it
    std::string a = argv[i];
    std::string file;
    if ((a == "--config" || a == "-config") && i + 1 < argc) file = argv[i + 1];
    else if (a.rfind("--config=", 0) == 0) file = a.substr(9);
    if (!file.empty()) MT_RETURN_IF_ERROR(apply_config_file(file));
  }
  absl::ParseCommandLine(argc, argv);
  DaemonConfig c;
  c.listen = absl::GetFlag(FLAGS_listen);
  c.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  c.state_dir = absl::GetFlag(FLAGS_state_dir);
  c.data_root = absl::GetFlag(FLAGS_data_root);
  for (absl::string_view p : absl::StrSplit(absl::GetFlag(FLAGS_nvme_paths), ',', absl::SkipEmpty()))
    c.nvme_paths.emplace_back(p);
  if (auto s = absl::GetFlag(FLAGS_host_memory); !s.empty()) {
    MT_ASSIGN_OR_RETURN(c.host_memory, parse_size_flag("--host_memory", s));
  }
  if (auto s = absl::GetFlag(FLAGS_device_memory); !s.empty()) {
    MT_ASSIGN_OR_RETURN(c.device_memory, parse_size_flag("--device_memory", s));
  } else {
    c.device_memory = default_device_budget();  // what a job's executor assumes too
  }
  c.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  c.tls_key = absl::GetFlag(FLAGS_tls_key);
  c.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  c.insecure = absl::GetFlag(FLAGS_insecure);
  c.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  c.max_streams = absl::GetFlag(FLAGS_max_streams);
  c.shutdown_timeout_s = absl::GetFlag(FLAGS_shutdown_timeout);
  c.peak_flops = absl::GetFlag(FLAGS_peak_flops);
  c.log_level = absl::GetFlag(FLAGS_log_level);
  c.retain_jobs = absl::GetFlag(FLAGS_retain_jobs);
  c.devices = absl::GetFlag(FLAGS_devices);
  c.retain_days = absl::GetFlag(FLAGS_retain_days);
  const std::string log_bytes = absl::GetFlag(FLAGS_log_file_bytes);
  auto lb = parse_byte_size(log_bytes);
  if (!lb.ok() || *lb < 1024)
    return invalid_argument("--log_file_bytes = '" + log_bytes + "' is not a size of at least 1K");
  c.log_file_bytes = *lb;
  MT_RETURN_IF_ERROR(finalize_config(c));
  return c;
}

}  // namespace mt::server

// megatraind's configuration: a plain struct (tests build one directly), filled from abseil
// flags and an optional config file of `flag: value` lines; the security rules of DESIGN §5.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/base/status.h"

namespace mt::server {

struct DaemonConfig {
  std::string listen = "127.0.0.1:50051";
  std::string metrics_listen = "127.0.0.1:9464";  // empty: no exporter
  std::string state_dir;                          // jobs, logs, checkpoints, spools
  std::string data_root;                          // every path in a spec resolves under it
  // Directories (local drives) jobs' NVMe tiers may use (memory.offload = nvme); a job naming
  // none uses them all. Existing directories, canonical once finalized.
  std::vector<std::string> nvme_paths;
  uint64_t host_memory = 0;                       // admission budget; 0: 80% of physical memory
  uint64_t device_memory = 0;                     // admission budget; 0: unlimited
  int devices = 1;                                // devices a job may use at once (spec.devices)
  std::string tls_cert, tls_key;
  std::string auth_token_file;
  bool insecure = false;
  int max_message_bytes = 4 << 20;
  int max_streams = 1024;  // WatchJob + StreamLogs calls open at once, and PushData apart (stream_slots.h)
  double shutdown_timeout_s = 30;
  double peak_flops = 0;  // for MFU; 0: estimated from the backend
  std::string log_level = "info";
  int retain_jobs = 0;     // keep the newest N finished jobs (0: all); see JobManager::Options
  double retain_days = 0;  // delete finished jobs older than this (0: never)
  uint64_t log_file_bytes = 16 << 20;  // each log's rotation size (a job's, the daemon's): 2x on disk at most
};

std::string default_state_dir();  // $STATE_DIRECTORY, $XDG_STATE_HOME/megatrain or ~/.local/state/megatrain
// A size flag's value by engine/base/byte_size's rule ("64G", "1.5TiB", "4096"); refused naming
// the flag.
Result<uint64_t> parse_size_flag(const std::string& flag, const std::string& text);
bool is_loopback_listen(const std::string& address);
// --listen (HOST:PORT or unix:PATH) and --metrics_listen (HOST:PORT or empty): the host present,
// the port a number in 0..65535 (0: any free port). Refused naming the flag otherwise.
Status check_listen_addresses(const DaemonConfig& c);
// Fills defaults (state dir, data root, host budget) and checks the security rules.
Status finalize_config(DaemonConfig& c);

// Parses argv (abseil flags, `--config FILE` applied first so the command line wins).
Result<DaemonConfig> config_from_command_line(int argc, char** argv);

}  // namespace mt::server

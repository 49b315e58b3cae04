// The daemon assembled: job manager, gRPC server (Trainer + health + reflection) and the
// /metrics exporter. main() and the in-process tests both run exactly this.
#pragma once
#include <grpcpp/server.h>

#include <chrono>
#include <functional>
#include <memory>

#include "server/config.h"
#include "server/daemon_log.h"
#include "server/job_manager.h"
#include "server/metrics.h"
#include "server/service.h"
#include "engine/base/file_lock.h"

namespace mt::server {

class Daemon {
 public:
  // `cfg` should have been through finalize_config (the security rules are checked again here).
  // `run_job`: see JobManager::Options::run_job (tests); unset in megatraind.
  static Result<std::unique_ptr<Daemon>> start(DaemonConfig cfg,
                                               std::function<Result<JobResult>(JobRunner&)> run_job = nullptr);
  ~Daemon();

  int port() const { return port_; }  // the bound gRPC port (listen port 0 picks a free one)
  int metrics_port() const { return exporter_ ? exporter_->port() : 0; }
  // Stops accepting calls, checkpoints the running job (it stays RUNNING and resumes on the next
  // start) and stops the worker. False when the job did not stop within `timeout`.
  bool stop(std::chrono::milliseconds timeout);
  // Non-OK once a job has lost the device (JobManager::device_fault): the process's CUDA
  // context is unusable, so main() stops the daemon and exits with exit_code().
  Status device_fault() const;
  // megatraind's exit status after stop(): 0, or kExitDeviceLost after a device fault, so that
  // systemd (Restart=on-failure) starts a fresh process and the job resumes from its checkpoint.
  static constexpr int kExitDeviceLost = 75;  // EX_TEMPFAIL: try again
  int exit_code() const { return device_fault().ok() ? 0 : kExitDeviceLost; }

 private:
  Daemon() = default;
  DaemonConfig cfg_;
  std::unique_ptr<FileLock> lock_;  // released last, after the job manager has stopped
  std::unique_ptr<DaemonLog> log_;   // STATE_DIR/daemon.log; uninstalled after the job manager
  Metrics metrics_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<TrainerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetricsExporter> exporter_;
  int port_ = 0;
  bool stopped_ = false;
};

}  // namespace mt::server

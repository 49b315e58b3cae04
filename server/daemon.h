// The daemon assembled: job manager, gRPC server (Trainer + health + reflection) and the
// /metrics exporter. main() and the in-process tests both run exactly this.
#pragma once
#include <grpcpp/server.h>

#include <chrono>
#include <memory>

#include "server/config.h"
#include "server/job_manager.h"
#include "server/metrics.h"
#include "server/service.h"
#include "server/state_lock.h"

namespace mt::server {

class Daemon {
 public:
  // `cfg` should have been through finalize_config (the security rules are checked again here).
  static Result<std::unique_ptr<Daemon>> start(DaemonConfig cfg);
  ~Daemon();

  int port() const { return port_; }  // the bound gRPC port (listen port 0 picks a free one)
  int metrics_port() const { return exporter_ ? exporter_->port() : 0; }
  // Stops accepting calls, checkpoints the running job (it stays RUNNING and resumes on the next
  // start) and stops the worker. False when the job did not stop within `timeout`.
  bool stop(std::chrono::milliseconds timeout);

 private:
  Daemon() = default;
  DaemonConfig cfg_;
  std::unique_ptr<StateLock> lock_;  // released last, after the job manager has stopped
  Metrics metrics_;
  std::unique_ptr<JobManager> jobs_;
  std::unique_ptr<TrainerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetricsExporter> exporter_;
  int port_ = 0;
  bool stopped_ = false;
};

}  // namespace mt::server

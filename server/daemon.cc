#include "kernels/gemm_provider.h"
#include "server/daemon.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cstdio>

#include "engine/base/json.h"

namespace mt::server {

Result<std::unique_ptr<Daemon>> Daemon::start(DaemonConfig cfg,
                                              std::function<Result<JobResult>(JobRunner&)> run_job) {
  MT_RETURN_IF_ERROR(finalize_config(cfg));
  std::unique_ptr<Daemon> d(new Daemon());
  d->cfg_ = cfg;
  // Before anything reads or writes the state directory: a second daemon on it stops here.
  MT_ASSIGN_OR_RETURN(d->lock_, FileLock::acquire(cfg.state_dir + "/megatraind.lock",
                                                 "the state directory '" + cfg.state_dir + "' is in use by another megatraind",
                                                 "stop it or choose another --state_dir"));
  MT_ASSIGN_OR_RETURN(Authenticator auth, Authenticator::from_file(cfg.auth_token_file));
  MT_ASSIGN_OR_RETURN(d->log_, DaemonLog::install(cfg.state_dir + "/daemon.log", cfg.log_file_bytes));

  std::shared_ptr<grpc::ServerCredentials> creds;
  if (!cfg.tls_cert.empty()) {
    MT_ASSIGN_OR_RETURN(std::string cert, read_file(cfg.tls_cert));
    MT_ASSIGN_OR_RETURN(std::string key, read_file(cfg.tls_key));
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({key, cert});
    creds = grpc::SslServerCredentials(ssl);
  } else {
    creds = grpc::InsecureServerCredentials();
  }

  JobManager::Options jo;
  jo.state_dir = cfg.state_dir;
  jo.data_root = cfg.data_root;
  jo.nvme_paths = cfg.nvme_paths;
  jo.budgets = {cfg.host_memory, cfg.device_memory, cfg.devices};
  jo.peak_flops = cfg.peak_flops;
  jo.run_job = std::move(run_job);
  jo.retain_jobs = cfg.retain_jobs;
  jo.retain_days = cfg.retain_days;
  jo.shutdown_timeout_s = cfg.shutdown_timeout_s;
  jo.daemon_log = d->log_->file();
  jo.log_file_bytes = cfg.log_file_bytes;
  jo.max_reply_bytes = size_t(cfg.max_message_bytes);
  d->jobs_ = std::make_unique<JobManager>(jo, d->metrics_);
  MT_RETURN_IF_ERROR(d->jobs_->start());
  d->service_ = std::make_unique<TrainerService>(*d->jobs_, std::move(auth), cfg.max_streams, d->metrics_);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(cfg.listen, creds, &d->port_);
  builder.SetMaxReceiveMessageSize(cfg.max_message_bytes);
  builder.SetMaxSendMessageSize(cfg.max_message_bytes);
  // gRPC sets SO_REUSEPORT by default: a second daemon on the same --listen (another state
  // directory, a stale instance) would start and take a share of the connections at random.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Clients ping an idle stream (a watch of a queued job, `logs -f`) to notice a daemon that
  // stopped answering; gRPC's default answers pings more often than every 5 minutes without data
  // with GOAWAY "too many pings", ending those streams. Pings a second apart are cheap.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.RegisterService(d->service_.get());
  d->server_ = builder.BuildAndStart();
  if (!d->server_ || d->port_ == 0) {
    d->jobs_->shutdown(std::chrono::milliseconds(int64_t(cfg.shutdown_timeout_s * 1000)));
    return Status(StatusCode::kUnavailable, "cannot listen on --listen=" + cfg.listen);
  }
  // The default health service answers only the overall "" service; name ours too, so a check of
  // "megatrain.v1.Trainer" (what load balancers and grpc_health_probe -service ask) is SERVING.
  if (auto* health = d->server_->GetHealthCheckService())
    health->SetServingStatus(v1::Trainer::service_full_name(), true);
  if (!cfg.metrics_listen.empty()) {
    auto exp = MetricsExporter::start(cfg.metrics_listen, d->metrics_.registry());
    if (!exp.ok()) {
      d->stop(std::chrono::milliseconds(int64_t(cfg.shutdown_timeout_s * 1000)));
      return exp.status();
    }
    d->exporter_ = std::move(exp).value();
  }
  // Where clients (and tests) find a daemon that was asked for port 0.
  const Json info = Json::object({{"pid", int64_t(::getpid())},
                                  {"port", d->port_},
                                  {"metrics_port", d->metrics_port()},
                                  {"listen", cfg.listen}});
  if (FILE* f = std::fopen((cfg.state_dir + "/megatraind.json").c_str(), "w")) {
    std::fputs((info.dump() + "\n").c_str(), f);
    std::fclose(f);
  }
  const std::string metrics = cfg.metrics_listen.empty()
                                  ? std::string("no metrics (--metrics_listen is empty)")
                                  : "metrics on " + cfg.metrics_listen + " (port " + std::to_string(d->metrics_port()) + ")";
  spdlog::info("megatraind serving on {} (port {}), {}, state {}", cfg.listen, d->port_, metrics, cfg.state_dir);
  spdlog::info("{}", cpu::gemm_provider_line());
  if (const std::string w = cpu::gemm_fallback_warning(); !w.empty()) spdlog::warn("{}", w);
  return d;
}

bool Daemon::stop(std::chrono::milliseconds timeout) {
  if (stopped_) return true;
  stopped_ = true;
  if (jobs_) jobs_->begin_stop();  // answers the calls waiting on the running job
  if (server_) {
    if (auto* health = server_->GetHealthCheckService()) health->Shutdown();
    // Refuse new calls; in-flight ones (watchers) get two seconds, then are cancelled.
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
  const bool ok = jobs_ ? jobs_->shutdown(timeout) : true;
  if (server_) server_->Wait();
  exporter_.reset();
  return ok;
}

Status Daemon::device_fault() const { return jobs_ ? jobs_->device_fault() : Status::Ok(); }

Daemon::~Daemon() { stop(std::chrono::milliseconds(int64_t(cfg_.shutdown_timeout_s * 1000))); }

}  // namespace mt::server

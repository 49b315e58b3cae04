// The Prometheus exporter: every metric of DESIGN §6, built once in one registry, fed from the
// engine's StepStats and the job manager. Job-level series carry a `job_id` label (`job` is Prometheus's
// target label). megatrain_data_queue_tokens is the unlabelled total over push jobs, present from
// the start; megatrain_job_data_queue_tokens{job_id} is the per-job breakdown.
#pragma once
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "engine/exec/engine_stats.h"
#include "engine/exec/planner.h"
#include "engine/job/held_out.h"
#include "engine/job/job.h"

namespace mt::server {

class Metrics {
 public:
  Metrics();
  ~Metrics();
  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

  // flops_per_token: model FLOPs per trained token (6N + attention); peak_flops: device peak.
  void on_step(const std::string& job, const StepStats& s, double flops_per_token, double peak_flops);
  // spec.eval: megatrain_eval_loss and megatrain_best_eval_loss (only for jobs that evaluate).
  void on_eval(const std::string& job, const EvalReport& r);
  // Each checkpoint: megatrain_checkpoint_{step,bytes,write_seconds,pause_seconds} of the latest.
  void on_checkpoint(const std::string& job, const CheckpointReport& r);
  // A job's gauges that describe where it stands (held-out losses, latest checkpoint step), set
  // from its record when a restarted daemon loads it, so a scrape says what `status` says.
  void restore_job(const std::string& job, const EvalProgress& eval, long checkpoint_step);
  // Removes every series of a job (DeleteJob, retention): a deleted job's series left behind
  // would pile up, and show data of a job that no longer exists.
  void forget_job(const std::string& job);
  void set_jobs(const std::map<std::string, int>& count_by_state);  // keys: queued, running, ...
  void set_memory(const MemoryPlan* running);                       // nullptr: nothing resident
  void set_data_queue(const std::string& job, double tokens);
  void set_state_dir_bytes(double bytes);  // megatrain_state_dir_bytes
  // megatrain_streams_open{kind}: the streams open against --max_streams (kind: read, push).
  prometheus::Gauge& streams_open(const std::string& kind) { return streams_.Add({{"kind", kind}}); }

 private:
  struct JobSeries;
  JobSeries& series(const std::string& job);
  void on_moe_step(const std::string& job, const StepStats& s);  // a mixture of experts' routing (mu_ held)
  void update_data_queue_total();  // mu_ held

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>&steps_, &tokens_, &h2d_bytes_, &d2h_bytes_, &stall_;
  prometheus::Family<prometheus::Histogram>&step_seconds_, &optimizer_seconds_;
  prometheus::Family<prometheus::Gauge>&loss_, &tps_, &h2d_bw_, &d2h_bw_, &mfu_, &grad_norm_, &clipped_, &lr_, &host_mem_,
      &device_mem_, &packing_, &eval_loss_, &best_eval_loss_, &jobs_, &data_queue_, &job_data_queue_, &moe_aux_loss_,
      &moe_routed_, &moe_h2d_, &moe_load_, &ckpt_step_, &ckpt_bytes_, &ckpt_write_, &ckpt_pause_;
  prometheus::Gauge& data_queue_total_;
  prometheus::Gauge& state_dir_bytes_;
  prometheus::Family<prometheus::Gauge>& streams_;
  std::mutex mu_;
  std::map<std::string, double> queue_by_job_;
  std::map<std::string, size_t> moe_layers_;  // per job: the moe_layer labels its load ratio has
  // Every memory kind a plan has had, from the kinds every plan has
  std::set<std::string> host_kinds_{"master", "grad", "adam_m", "adam_v", "bf16_shadow", "checkpoints"};
  std::set<std::string> device_kinds_{"weight_slots",   "grad_slots",      "checkpoints",
                                      "residual_grads", "attention_state", "chunk_workspace"};
  std::map<std::string, std::unique_ptr<JobSeries>> jobs_series_;
};

// Serves a registry as Prometheus text on GET /metrics at `address` ("127.0.0.1:9464"; port 0
// picks a free one), every connection polled by one thread (a slow client holds up no other).
// A small HTTP/1.1 loop of our own rather than prometheus-cpp's civetweb Exposer: civetweb starts
// its threads with 100 KiB stacks, and once cuBLAS (94 KiB of static TLS) is linked in, glibc can
// no longer fit the TLS in them and the Exposer fails to start.
class MetricsExporter {
 public:
  static Result<std::unique_ptr<MetricsExporter>> start(const std::string& address,
                                                        std::shared_ptr<prometheus::Registry> registry);
  ~MetricsExporter();
  int port() const { return port_; }

 private:
  void serve();
  std::string answer(const std::string& request) const;  // the whole HTTP response

  std::shared_ptr<prometheus::Registry> registry_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace mt::server

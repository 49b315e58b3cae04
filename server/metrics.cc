#include "server/metrics.h"

#include <algorithm>
#include <exception>

namespace mt::server {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

struct Metrics::JobSeries {
  prometheus::Counter *steps, *tokens, *h2d, *d2h, *stall;
  prometheus::Histogram *step_seconds, *optimizer_seconds;
  prometheus::Gauge *loss, *tps, *h2d_bw, *d2h_bw, *mfu, *grad_norm, *clipped, *lr;
};

namespace {
// Not `job`: Prometheus sets `job` on every scraped series to the scrape job's name, and a
// target's own `job` label would be renamed `exported_job` (honor_labels: false).
constexpr const char* kJobLabel = "job_id";

const prometheus::Histogram::BucketBoundaries& second_buckets() {
  static const prometheus::Histogram::BucketBoundaries b = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                            0.5,   1,      2.5,   5,    10,    25,   60,  150, 300};
  return b;
}
}  // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      steps_(BuildCounter().Name("megatrain_steps_total").Help("Optimizer steps taken").Register(*registry_)),
      tokens_(BuildCounter().Name("megatrain_tokens_total").Help("Tokens trained on").Register(*registry_)),
      h2d_bytes_(BuildCounter().Name("megatrain_h2d_bytes_total").Help("Host to device bytes").Register(*registry_)),
      d2h_bytes_(BuildCounter().Name("megatrain_d2h_bytes_total").Help("Device to host bytes").Register(*registry_)),
      stall_(BuildCounter()
                 .Name("megatrain_gpu_stall_seconds_total")
                 .Help("Seconds compute waited on copies or the optimizer")
                 .Register(*registry_)),
      step_seconds_(BuildHistogram().Name("megatrain_step_seconds").Help("Optimizer step wall time").Register(*registry_)),
      optimizer_seconds_(BuildHistogram()
                             .Name("megatrain_optimizer_seconds")
                             .Help("CPU seconds in gradient norm + AdamW per step")
                             .Register(*registry_)),
      loss_(BuildGauge().Name("megatrain_loss").Help("Training loss of the last step (nats/token)").Register(*registry_)),
      tps_(BuildGauge().Name("megatrain_tokens_per_second").Help("Tokens per second of the last step").Register(*registry_)),
      h2d_bw_(BuildGauge()
                  .Name("megatrain_h2d_bandwidth_bytes_per_second")
                  .Help("Host to device bandwidth while copying, last step")
                  .Register(*registry_)),
      d2h_bw_(BuildGauge()
                  .Name("megatrain_d2h_bandwidth_bytes_per_second")
                  .Help("Device to host bandwidth while copying, last step")
                  .Register(*registry_)),
      mfu_(BuildGauge()
               .Name("megatrain_model_flops_utilization")
               .Help("Model FLOPs of the last step over the device's peak (0..1)")
               .Register(*registry_)),
      grad_norm_(BuildGauge()
                     .Name("megatrain_grad_norm")
                     .Help("Global gradient norm of the last step, before clipping")
                     .Register(*registry_)),
      clipped_(BuildGauge()
                   .Name("megatrain_grad_clipped")
                   .Help("1 when clipping (optimizer.grad_clip) scaled the last step's update, else 0")
                   .Register(*registry_)),
      lr_(BuildGauge().Name("megatrain_learning_rate").Help("Learning rate of the last step's update").Register(*registry_)),
      host_mem_(BuildGauge().Name("megatrain_host_memory_bytes").Help("Planned host memory of the running job by kind").Register(*registry_)),
      device_mem_(BuildGauge()
                      .Name("megatrain_device_memory_bytes")
                      .Help("Planned device memory of the running job by kind")
                      .Register(*registry_)),
      packing_(BuildGauge()
                   .Name("megatrain_packing_efficiency")
                   .Help("Real tokens / slots of the batches a jsonl or shards job has trained on this run (0..1)")
                   .Register(*registry_)),
      eval_loss_(BuildGauge()
                     .Name("megatrain_eval_loss")
                     .Help("Held-out loss of the latest evaluation (spec.eval), mean nats per counted target")
                     .Register(*registry_)),
      best_eval_loss_(BuildGauge()
                          .Name("megatrain_best_eval_loss")
                          .Help("Lowest held-out loss of the job's evaluations so far")
                          .Register(*registry_)),
      jobs_(BuildGauge().Name("megatrain_jobs").Help("Jobs by state").Register(*registry_)),
      data_queue_(BuildGauge()
                      .Name("megatrain_data_queue_tokens")
                      .Help("Pushed tokens spooled and not yet trained on, all push jobs together")
                      .Register(*registry_)),
      job_data_queue_(BuildGauge()
                          .Name("megatrain_job_data_queue_tokens")
                          .Help("Pushed tokens spooled and not yet trained on, per push job")
                          .Register(*registry_)),
      moe_aux_loss_(BuildGauge()
                        .Name("megatrain_moe_aux_loss")
                        .Help("Load-balancing loss of the last step (mean over micro-batches, before its coefficient)")
                        .Register(*registry_)),
      moe_routed_(BuildGauge()
                      .Name("megatrain_moe_experts_routed_ratio")
                      .Help("Experts the last step routed tokens to (uploaded and updated) over all experts (0..1)")
                      .Register(*registry_)),
      moe_h2d_(BuildGauge()
                   .Name("megatrain_moe_expert_h2d_ratio")
                   .Help("Expert bytes the last step moved to the device over what uploading every expert would")
                   .Register(*registry_)),
      moe_load_(BuildGauge()
                    .Name("megatrain_moe_expert_load_ratio")
                    .Help("Per MoE layer: the busiest expert's routed tokens over the mean (1 = balanced), last step")
                    .Register(*registry_)),
      ckpt_step_(BuildGauge()
                     .Name("megatrain_checkpoint_step")
                     .Help("Step of the job's latest checkpoint (published)")
                     .Register(*registry_)),
      ckpt_bytes_(BuildGauge()
                      .Name("megatrain_checkpoint_bytes")
                      .Help("Size on disk of the job's latest checkpoint")
                      .Register(*registry_)),
      ckpt_write_(BuildGauge()
                      .Name("megatrain_checkpoint_write_seconds")
                      .Help("Seconds from the latest checkpoint's start to its publish")
                      .Register(*registry_)),
      ckpt_pause_(BuildGauge()
                      .Name("megatrain_checkpoint_pause_seconds")
                      .Help("Seconds the training paused for the latest checkpoint (the step's updates, and the write "
                            "or the updates that waited for a writer beside training)")
                      .Register(*registry_)),
      data_queue_total_(data_queue_.Add({})),
      state_dir_bytes_(BuildGauge()
                           .Name("megatrain_state_dir_bytes")
                           .Help("Bytes under the state directory (jobs, spools, logs, checkpoints), measured at "
                                 "startup, each checkpoint, each job's end, and each delete or retention sweep")
                           .Register(*registry_)
                           .Add({})),
      streams_(BuildGauge()
                   .Name("megatrain_streams_open")
                   .Help("Streaming calls open: kind=read (WatchJob, StreamLogs) and kind=push (PushData), "
                         "each bounded by --max_streams")
                   .Register(*registry_)) {
  streams_open("read");
  streams_open("push");
  set_jobs({});
  set_memory(nullptr);
}

Metrics::~Metrics() = default;

Metrics::JobSeries& Metrics::series(const std::string& job) {
  auto& s = jobs_series_[job];
  if (!s) {
    const prometheus::Labels l = {{kJobLabel, job}};
    s = std::make_unique<JobSeries>(JobSeries{&steps_.Add(l), &tokens_.Add(l), &h2d_bytes_.Add(l), &d2h_bytes_.Add(l),
                                              &stall_.Add(l), &step_seconds_.Add(l, second_buckets()),
                                              &optimizer_seconds_.Add(l, second_buckets()), &loss_.Add(l),
                                              &tps_.Add(l), &h2d_bw_.Add(l), &d2h_bw_.Add(l), &mfu_.Add(l),
                                              &grad_norm_.Add(l), &clipped_.Add(l), &lr_.Add(l)});
  }
  return *s;
}

void Metrics::on_step(const std::string& job, const StepStats& st, double flops_per_token, double peak_flops) {
  std::lock_guard<std::mutex> lock(mu_);
  JobSeries& s = series(job);
  s.steps->Increment();
  s.tokens->Increment(double(st.tokens));
  s.h2d->Increment(double(st.h2d_bytes));
  s.d2h->Increment(double(st.d2h_bytes));
  s.stall->Increment(st.stall_seconds());
  s.step_seconds->Observe(st.step_seconds);
  s.optimizer_seconds->Observe(st.optimizer_seconds);
  s.loss->Set(st.loss);
  const double tps = st.tokens_per_second();
  s.tps->Set(tps);
  s.h2d_bw->Set(st.h2d_bandwidth());
  s.d2h_bw->Set(st.d2h_bandwidth());
  s.mfu->Set(peak_flops > 0 ? tps * flops_per_token / peak_flops : 0);
  s.grad_norm->Set(st.grad_norm);
  s.clipped->Set(st.clipped ? 1 : 0);
  s.lr->Set(st.lr);
  if (st.packing_efficiency >= 0) packing_.Add({{kJobLabel, job}}).Set(st.packing_efficiency);
  if (st.is_moe()) on_moe_step(job, st);
}

void Metrics::on_moe_step(const std::string& job, const StepStats& st) {
  const prometheus::Labels l = {{kJobLabel, job}};
  moe_aux_loss_.Add(l).Set(st.aux_loss);
  moe_routed_.Add(l).Set(double(st.experts_routed) / double(st.experts_total));
  if (st.dense_expert_h2d_bytes > 0)
    moe_h2d_.Add(l).Set(double(st.expert_h2d_bytes) / double(st.dense_expert_h2d_bytes));
  for (size_t i = 0; i < st.expert_load.size(); ++i)
    moe_load_.Add({{kJobLabel, job}, {"moe_layer", std::to_string(i)}}).Set(st.expert_load[i]);
  moe_layers_[job] = std::max(moe_layers_[job], st.expert_load.size());
}

void Metrics::restore_job(const std::string& job, const EvalProgress& eval, long checkpoint_step) {
  std::lock_guard<std::mutex> lock(mu_);
  const prometheus::Labels l = {{kJobLabel, job}};
  if (eval.step > 0) {
    eval_loss_.Add(l).Set(eval.loss);
    best_eval_loss_.Add(l).Set(eval.best_loss);
  }
  if (checkpoint_step > 0) ckpt_step_.Add(l).Set(double(checkpoint_step));
}

namespace {
template <typename T>
void remove_series(prometheus::Family<T>& family, const prometheus::Labels& labels) {
  if (family.Has(labels)) family.Remove(&family.Add(labels));
}
}  // namespace

void Metrics::forget_job(const std::string& job) {
  std::lock_guard<std::mutex> lock(mu_);
  const prometheus::Labels l = {{kJobLabel, job}};
  if (auto it = jobs_series_.find(job); it != jobs_series_.end()) {
    const JobSeries& js = *it->second;
    steps_.Remove(js.steps), tokens_.Remove(js.tokens), h2d_bytes_.Remove(js.h2d), d2h_bytes_.Remove(js.d2h);
    stall_.Remove(js.stall), step_seconds_.Remove(js.step_seconds), optimizer_seconds_.Remove(js.optimizer_seconds);
    loss_.Remove(js.loss), tps_.Remove(js.tps), h2d_bw_.Remove(js.h2d_bw), d2h_bw_.Remove(js.d2h_bw);
    mfu_.Remove(js.mfu), grad_norm_.Remove(js.grad_norm), clipped_.Remove(js.clipped), lr_.Remove(js.lr);
    jobs_series_.erase(it);
  }
  for (auto* g : {&packing_, &eval_loss_, &best_eval_loss_, &moe_aux_loss_, &moe_routed_, &moe_h2d_, &ckpt_step_,
                  &ckpt_bytes_, &ckpt_write_, &ckpt_pause_})
    remove_series(*g, l);
  for (size_t i = 0; i < moe_layers_[job]; ++i) remove_series(moe_load_, {{kJobLabel, job}, {"moe_layer", std::to_string(i)}});
  moe_layers_.erase(job);
  remove_series(job_data_queue_, l);
  queue_by_job_.erase(job);
  update_data_queue_total();
}

void Metrics::on_eval(const std::string& job, const EvalReport& r) {
  std::lock_guard<std::mutex> lock(mu_);
  eval_loss_.Add({{kJobLabel, job}}).Set(r.loss);
  best_eval_loss_.Add({{kJobLabel, job}}).Set(r.best_loss);
}

void Metrics::on_checkpoint(const std::string& job, const CheckpointReport& r) {
  std::lock_guard<std::mutex> lock(mu_);
  const prometheus::Labels l = {{kJobLabel, job}};
  ckpt_step_.Add(l).Set(double(r.step));
  ckpt_bytes_.Add(l).Set(double(r.bytes));
  ckpt_write_.Add(l).Set(r.write_seconds);
  ckpt_pause_.Add(l).Set(r.pause_seconds);
}

void Metrics::set_jobs(const std::map<std::string, int>& count_by_state) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const char* state : {"queued", "running", "succeeded", "failed", "cancelled", "paused"}) {
    auto it = count_by_state.find(state);
    jobs_.Add({{"state", state}}).Set(it == count_by_state.end() ? 0 : it->second);
  }
}

void Metrics::set_memory(const MemoryPlan* plan) {
  std::lock_guard<std::mutex> lock(mu_);
  host_mem_.Add({{"kind", "total"}}).Set(plan ? double(plan->host_bytes) : 0);
  device_mem_.Add({{"kind", "total"}}).Set(plan ? double(plan->device_bytes) : 0);
  // Every kind any plan had is set, to 0 when this one has none of it: a kind only an earlier job
  // had (eval_set, moe_state, ...) kept that job's bytes beside the running job's total.
  for (const std::string& k : host_kinds_) host_mem_.Add({{"kind", k}}).Set(0);
  for (const std::string& k : device_kinds_) device_mem_.Add({{"kind", k}}).Set(0);
  if (!plan) return;
  for (const auto& [k, v] : plan->host_by_kind) {
    host_kinds_.insert(k);
    host_mem_.Add({{"kind", k}}).Set(double(v));
  }
  for (const auto& [k, v] : plan->device_by_kind) {
    device_kinds_.insert(k);
    device_mem_.Add({{"kind", k}}).Set(double(v));
  }
}

void Metrics::set_data_queue(const std::string& job, double tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  job_data_queue_.Add({{kJobLabel, job}}).Set(tokens);
  queue_by_job_[job] = tokens;
  update_data_queue_total();
}

void Metrics::update_data_queue_total() {
  double total = 0;
  for (const auto& [id, n] : queue_by_job_) total += n;
  data_queue_total_.Set(total);
}

void Metrics::set_state_dir_bytes(double bytes) { state_dir_bytes_.Set(bytes); }

}  // namespace mt::server

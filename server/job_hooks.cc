// The engine's callbacks for one run of a job (JobManager::hooks_for): each step, log line,
// evaluation and checkpoint goes into the job's record, its log, the metrics and, as one change
// under order(), to its watchers.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "engine/job/held_out.h"
#include "server/job_manager.h"
#include "server/managed_job.h"

namespace mt::server {

namespace {
// The job log's line for a step: "step 12/200 loss 3.451234 grad_norm 0.8123 lr 0.0003 tokens/s
// 1234 step 0.101 s" (" (clipped)" after the norm when clipping scaled the update); a mixture of
// experts adds " aux_loss 2.0123 experts 97/128".
std::string step_line(const StepStats& s, long total) {
  char buf[288];
  int n = std::snprintf(buf, sizeof buf, "step %ld/%ld loss %.6f grad_norm %.4g%s lr %.4g tokens/s %.0f step %.3f s",
                        s.step, total, s.loss, s.grad_norm, s.clipped ? " (clipped)" : "", double(s.lr),
                        s.tokens_per_second(), s.step_seconds);
  if (s.is_moe() && n > 0 && size_t(n) < sizeof buf)
    std::snprintf(buf + n, sizeof buf - size_t(n), " aux_loss %.4f experts %ld/%ld", s.aux_loss, s.experts_routed,
                  s.experts_total);
  return buf;
}

double estimate_peak_flops(const JobSpec& spec) {
  if (spec.backend == "cuda") return spec.precision == "fp32" ? 67e12 : 989e12;  // H100/H200 SXM dense
  // CPU: AVX2 FMA, 2 units x 8 lanes x 2 flops per cycle per core at ~2.5 GHz.
  return double(std::max(1u, std::thread::hardware_concurrency())) * 32 * 2.5e9;
}

spdlog::level::level_enum spdlog_level(LogLevel level) {
  return level == LogLevel::kError     ? spdlog::level::err
         : level == LogLevel::kWarning ? spdlog::level::warn
         : level == LogLevel::kDebug   ? spdlog::level::debug
                                       : spdlog::level::info;
}
}  // namespace

JobHooks JobManager::hooks_for(const std::shared_ptr<Job>& job) {
  const std::string id = job->rec.id;
  const double peak = opt_.peak_flops > 0 ? opt_.peak_flops : estimate_peak_flops(job->spec);
  JobHooks hooks;
  hooks.on_step = [this, job, id, peak](const StepStats& s) {
    job->log->append("info", step_line(s, job->rec.total_steps));
    metrics_.on_step(id, s, job->flops_per_token, peak);
    if (job->spool) metrics_.set_data_queue(id, double(job->spool->tokens() - job->progress->consumed));
    v1::JobEvent ev;
    const std::unique_lock<std::mutex> ordered = order();
    {
      std::lock_guard<std::mutex> lock(mu_);
      JobRecord& r = job->rec;
      r.step = s.step;
      r.loss = s.loss;
      if (job->run_steps == 0 && r.first_loss == 0) r.first_loss = s.loss;
      r.tokens_per_second = s.tokens_per_second();
      job->run_seconds += s.step_seconds;
      job->run_tokens += double(s.tokens);
      job->run_steps += 1;
      job->last = s;
      ev = event_of(*job);
    }
    deliver(ordered, id, ev, /*progress=*/true);
  };
  hooks.on_log = [this, job, id](LogLevel level, const std::string& msg) {
    const auto lvl = spdlog_level(level);
    const auto name = spdlog::level::to_string_view(lvl);
    job->log->append(std::string(name.data(), name.size()), msg);
    spdlog::log(lvl, "job {}: {}", id, msg);
    if (level == LogLevel::kDebug) return;
    v1::JobEvent ev;
    const std::unique_lock<std::mutex> ordered = order();
    {
      std::lock_guard<std::mutex> lock(mu_);
      ev = event_of(*job);
    }
    ev.set_message(msg);
    deliver(ordered, id, ev);
  };
  hooks.on_eval = [this, job, id](const EvalReport& r) {
    job->log->append("info", eval_line(r));
    metrics_.on_eval(id, r);
    v1::JobEvent ev;
    const std::unique_lock<std::mutex> ordered = order();
    {
      std::lock_guard<std::mutex> lock(mu_);
      job->rec.eval = {r.step, r.loss, r.best_step, r.best_loss};
      ev = event_of(*job);
    }
    ev.set_step(r.step);
    ev.set_eval_loss(r.loss);
    ev.set_eval_best(r.best);
    ev.set_best_eval_step(r.best_step);
    ev.set_best_eval_loss(r.best_loss);
    deliver(ordered, id, ev, /*progress=*/true);
  };
  hooks.on_checkpoint = [this, job, id](const std::string& dir, long step) {
    std::vector<CheckpointDone> waiters;
    v1::JobEvent ev;
    std::unique_lock<std::mutex> ordered = order();
    {
      std::lock_guard<std::mutex> lock(mu_);
      job->rec.last_checkpoint = dir;
      (void)save(*job);
      resave_unsaved();  // a job that ended while this one was queued: its record, not days later
      waiters.swap(job->ckpt_waiters);
      ev = event_of(*job);
    }
    ev.set_checkpoint(dir);
    deliver(ordered, id, ev);  // before the answers: a watch begun on an answer does not see it again
    ordered.unlock();
    for (auto& w : waiters) w(Status::Ok(), dir, step);
    refresh_disk_usage();
  };
  hooks.checkpoint_bound_s = opt_.shutdown_timeout_s;
  hooks.on_checkpoint_cost = [this, id](const CheckpointReport& r) { metrics_.on_checkpoint(id, r); };
  hooks.make_push_source = [job](const JobSpec&, int vocab) {
    return make_push_source(job->spool, vocab, job->progress);
  };
  hooks.yield_when_starved = [this] {  // only when another job waits for the device
    std::lock_guard<std::mutex> lock(mu_);
    return !queue_.empty();
  };
  return hooks;
}

}  // namespace mt::server

// What a job looks like to clients: its proto (GetJob, ListJobs), its events (WatchJob), and
// the log and files the logs and artifact RPCs read. JobManager members; mu_ is held by callers
// of to_proto and event_of.
#include "server/job_manager.h"

#include <cstdlib>

#include "server/managed_job.h"
#include "server/spec_convert.h"

namespace mt::server {

namespace {
// The last step's update, in a JobEvent or a Job (the same field names in both).
template <typename Proto>
void set_update(Proto& out, const StepStats& last) {
  out.set_grad_norm(last.grad_norm);
  out.set_grad_clipped(last.clipped);
  out.set_learning_rate(last.lr);
  if (last.is_moe()) out.set_aux_loss(last.aux_loss);
  out.set_experts_routed(last.experts_routed);
  out.set_experts_total(last.experts_total);
}
}  // namespace

v1::JobEvent JobManager::event_of(const Job& job) const {
  v1::JobEvent ev;
  const JobRecord& r = job.rec;
  ev.set_job_id(r.id);
  ev.set_state(r.state);
  ev.set_reason(r.reason);
  ev.set_step(r.step);
  ev.set_total_steps(r.total_steps);
  ev.set_loss(r.loss);
  ev.set_tokens_per_second(r.tokens_per_second);
  ev.set_step_seconds(job.last.step_seconds);
  ev.set_h2d_gbps(job.last.h2d_bandwidth() / 1e9);
  ev.set_d2h_gbps(job.last.d2h_bandwidth() / 1e9);
  set_update(ev, job.last);
  if (job.run_steps > 0) ev.set_eta_seconds(double(r.total_steps - r.step) * job.run_seconds / double(job.run_steps));
  ev.set_waiting_for_data(job.progress->waiting.load() || job.parked);
  ev.set_queue_position(queue_position(job));
  ev.set_preemptions(r.preemptions);
  return ev;
}

v1::Job JobManager::to_proto(const Job& job) const {
  v1::Job out;
  const JobRecord& r = job.rec;
  out.set_id(r.id);
  out.set_name(r.name);
  out.set_state(r.state);
  out.set_reason(r.reason);
  // The spec never changes after submit: converted once (JSON -> JobSpec -> proto costs ~0.2 ms,
  // which ListJobs of many jobs would otherwise pay per job while holding the lock the running
  // job's step hook takes).
  if (!job.spec_proto && r.spec.is_object()) {
    auto spec = job_spec_from_json(r.spec);
    if (spec.ok()) job.spec_proto = std::make_shared<const v1::JobSpec>(spec_to_proto(*spec));
  }
  if (job.spec_proto) *out.mutable_spec() = *job.spec_proto;
  out.set_step(r.step);
  out.set_total_steps(r.total_steps);
  out.set_loss(r.loss);
  out.set_first_loss(r.first_loss);
  out.set_tokens_per_second(r.tokens_per_second);
  if (job.run_seconds > 0) out.set_mean_tokens_per_second(job.run_tokens / job.run_seconds);
  out.set_last_checkpoint(r.last_checkpoint);
  out.set_created_unix_ms(r.created_ms);
  out.set_started_unix_ms(r.started_ms);
  out.set_finished_unix_ms(r.finished_ms);
  out.set_waiting_for_data(job.progress->waiting.load() || job.parked);
  out.set_data_spooled_tokens(job.spool ? job.spool->tokens() : r.spooled_tokens);
  out.set_data_consumed_tokens(job.progress->consumed.load());
  out.set_data_consumed_checksum(job.progress->checksum.load());
  out.set_priority(job.priority);
  out.set_queue_position(queue_position(job));
  out.set_preemptions(r.preemptions);
  if (job.last.packing_efficiency >= 0) out.set_packing_efficiency(job.last.packing_efficiency);
  if (job.spec.logging.tensorboard) out.set_tensorboard_dir(job.dir + "/tensorboard");
  set_update(out, job.last);
  out.set_eval_step(r.eval.step);
  out.set_eval_loss(r.eval.loss);
  out.set_best_eval_step(r.eval.best_step);
  out.set_best_eval_loss(r.eval.best_loss);
  return out;
}

Result<std::shared_ptr<LogFile>> JobManager::log(const std::string& id) {
  if (id.empty() || id == "daemon") {
    if (!opt_.daemon_log) return not_found("this daemon keeps no log of its own");
    return opt_.daemon_log;
  }
  std::lock_guard<std::mutex> lock(mu_);
  MT_ASSIGN_OR_RETURN(auto job, find(id));
  if (!job->log) return not_found("job " + id + " has no log (its directory could not be opened)");
  return job->log;
}

Result<JobManager::JobFiles> JobManager::files(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  MT_ASSIGN_OR_RETURN(auto job, find(id));
  return JobFiles{job->dir, job->rec.state, running_ ? running_->plan.host_bytes : 0, opt_.data_root, opt_.budgets.host};
}

// ---- Watchers (WatchJob) --------------------------------------------------------------------

Result<uint64_t> JobManager::watch(const std::string& id, Listener l, bool from_start) {
  // order() from the state to the registration: a change in between (the job's end, say) would
  // otherwise reach nobody, and the watch would wait for it forever; and a change the state
  // already shows has been delivered before this watch could register.
  const std::unique_lock<std::mutex> ordered = order();
  v1::JobEvent first;
  {
    std::lock_guard<std::mutex> lock(mu_);
    MT_ASSIGN_OR_RETURN(auto job, find(id));
    first = event_of(*job);
  }
  if (from_start) history_.replay(id, l);
  l(first);
  const uint64_t token = next_listener_++;
  listeners_[token] = {id, std::move(l)};
  return token;
}

void JobManager::unwatch(uint64_t token) {
  std::lock_guard<std::mutex> lock(listeners_mu_);
  listeners_.erase(token);
}

void JobManager::deliver(const std::unique_lock<std::mutex>& order, const std::string& id, const v1::JobEvent& ev,
                         bool progress) {
  if (!order.owns_lock() || order.mutex() != &listeners_mu_) std::abort();  // a change told out of order
  if (progress) history_.keep(id, ev);
  if (terminal(ev.state())) history_.ended(id);
  for (auto& [token, entry] : listeners_)
    if (entry.first == id) entry.second(ev);
}

}  // namespace mt::server

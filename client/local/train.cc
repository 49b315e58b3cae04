// megatrain train SPEC: runs a job in the foreground with the engine linked in (no daemon).
// Ctrl-C (SIGINT) or SIGTERM (a service manager, `kill`) stops at the next step boundary, writes
// a checkpoint and exits cleanly; a second one stops at once. Under mpirun or srun each process is
// one rank of a data-parallel job (engine/exec/data_parallel_executor.h); rank 0 writes the
// checkpoints.
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <ctime>

#include "client/cli.h"
#include "client/progress.h"
#include "client/spec_file.h"
#include "engine/base/host_memory.h"
#include "engine/dist/launch_env.h"
#include "engine/dist/mpi_comm.h"
#include "engine/io/checkpoint.h"
#include "engine/job/job.h"

namespace mt::cli {

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
// The run a first signal asks to stop at once (an atomic store, async-signal-safe): the step loop
// sees it at its boundary and an evaluation between two of its batches.
std::atomic<JobRunner*> g_runner{nullptr};
std::atomic<int64_t> g_first_stop_ns{0};  // CLOCK_MONOTONIC when the first stop signal came
// A second signal this soon after the first is the same Ctrl-C delivered twice (the terminal's
// and a launcher's forwarded copy), not a user pressing it again.
constexpr int64_t kSameSignalNs = 250'000'000;

int64_t monotonic_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

// The first signal asks for a stop at the next step boundary, with a checkpoint; a second one,
// for a user who cannot wait for a long step or a large write, ends the process by that signal
// at once (a checkpoint is published by rename: the last whole one stays, a partial one is
// cleaned up by the next run). Only async-signal-safe calls; errno is the interrupted code's.
void on_stop_signal(int sig) {
  const int saved_errno = errno;
  const int64_t now = monotonic_ns(), first = g_first_stop_ns.load();
  if (first == 0) {
    g_first_stop_ns.store(now);
    g_interrupted = 1;
    if (JobRunner* r = g_runner.load()) r->request_cancel();
    static constexpr char kSaid[] =
        "megatrain: stopping after this step with a checkpoint; Ctrl-C again stops now without one\n";
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, kSaid, sizeof kSaid - 1);
  } else if (now - first >= kSameSignalNs) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);  // delivered, with the default action, when this handler returns
  }
  errno = saved_errno;
}
constexpr int kStopSignals[] = {SIGINT, SIGTERM};

Status apply_overrides(const Args& a, JobSpec& spec) {
  if (a.has("steps")) {
    MT_ASSIGN_OR_RETURN(const int64_t steps, a.integer("steps", 0, 1, INT64_MAX));
    spec.steps = long(steps);
    spec.train.schedule.total_steps = spec.steps;
  }
  if (a.has("backend")) spec.backend = a.get("backend");
  if (a.has("executor")) spec.executor = a.get("executor");
  if (a.has("precision")) spec.precision = a.get("precision");
  if (a.has("devices")) {
    MT_ASSIGN_OR_RETURN(const int64_t devices, a.integer("devices", 1, 1, 64));
    spec.devices = int(devices);
  }
  if (a.has("shard-optimizer")) spec.shard_optimizer = true;
  return validate(spec);
}

// A run that trained no step (the job in --out had already finished) reports the saved loss and
// no throughput: there is none to measure, and 0 would read as a measurement.
Json summary_of(const JobResult& r) {
  Json j = Json::object({{"steps", int64_t(r.steps_done)}, {"final_loss", r.final_loss}});
  if (r.steps_run > 0) j.set("tokens_per_second", r.tokens_per_second);
  else if (r.cancelled) j.set("note", "stopped before a step: final_loss is the loss saved in its checkpoint");
  else j.set("note", "nothing to train: the job had already reached step " + std::to_string(r.steps_done) +
                         "; final_loss is the loss saved in its checkpoint");
  if (r.packing_efficiency >= 0) j.set("packing_efficiency", r.packing_efficiency);
  if (r.data_exhausted) j.set("data_exhausted", true);
  eval_progress_to_json(r.eval, j);
  j.set("checkpoint", r.checkpoint);
  j.set("cancelled", r.cancelled);
  return j;
}

// The run's directory: --out, or megatrain-runs/NAME. Refused: an empty --out (an unset variable
// would put checkpoints in /checkpoints), a name that is not one plain directory name, and a
// checkpoint directory (RUN/checkpoints, as the summary prints it: the run is its parent).
Result<std::string> run_dir(const Args& a, const std::string& name) {
  if (a.has("out")) {
    const std::string out = a.get("out");
    if (out.empty()) return invalid_argument("--out is empty: name the run's directory");
    if (is_training_checkpoint(out))
      return invalid_argument("--out '" + out + "' is a checkpoint directory; give the run's directory (the one " +
                              "holding checkpoints/)");
    return out;
  }
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    return invalid_argument("name = '" + name + "' is not a plain directory name for megatrain-runs/NAME; give --out DIR");
  return "megatrain-runs/" + name;
}

}  // namespace

int cmd_train(const Args& a) {
  if (a.positional().size() != 1) return usage_error("train");
  auto spec = load_job_spec(a.positional()[0]);
  if (!spec.ok()) return fail(kUsage, spec.status().message());
  if (Status s = apply_overrides(a, *spec); !s.ok()) return fail(kUsage, s.message());
  auto dir = run_dir(a, spec->name);
  if (!dir.ok()) return fail(kUsage, dir.status().message());

  Progress progress(a.json());
  JobHooks hooks;
  JobRunner* runner_ptr = nullptr;
  const long steps = spec->steps;
  hooks.on_step = [&](const StepStats& s) {
    ProgressEvent e{.step = s.step, .steps = steps, .loss = s.loss, .tokens_per_second = s.tokens_per_second(),
                    .step_seconds = s.step_seconds, .h2d_gbps = s.h2d_bandwidth() / 1e9,
                    .d2h_gbps = s.d2h_bandwidth() / 1e9, .eta_seconds = double(steps - s.step) * s.step_seconds,
                    .grad_norm = s.grad_norm, .learning_rate = double(s.lr), .grad_clipped = s.clipped,
                    .aux_loss = s.aux_loss, .experts_routed = s.experts_routed, .experts_total = s.experts_total};
    progress.step(e);
    // A reader that went away (`| head -1`) stops the run as Ctrl-C does: with a checkpoint,
    // where SIGPIPE used to kill it without one.
    if (g_interrupted || std::ferror(stdout)) runner_ptr->request_cancel();
  };
  hooks.on_eval = [&](const EvalReport& r) { progress.eval({r.step, r.loss, r.best, r.best_step, r.best_loss}); };
  hooks.on_log = [&](LogLevel, const std::string& m) { progress.message(m); };
  // The host budget is this machine's RAM (or its container's limit): a run past it is refused
  // with its plan's numbers before any memory is taken, not killed by the kernel part-way
  // through its allocation. --host-memory gives another (0: none).
  auto host = a.size("host-memory", physical_memory_bytes());
  if (!host.ok()) return fail(kUsage, host.status().message());
  JobRunner runner(*spec, *dir, hooks, 0, *host);
  runner_ptr = &runner;
  g_runner.store(&runner);
  for (int sig : kStopSignals) std::signal(sig, on_stop_signal);
  std::signal(SIGPIPE, SIG_IGN);  // a closed stdout is seen by ferror at the next step
  // The handler stays to the end: a press after the run has stopped (during its summary or
  // mpi_finalize) stops the process only if it is a second press, not a duplicate of the first.
  auto r = runner.run();
  g_runner.store(nullptr);  // the handler's later presses find no run (runner ends with this scope)
  if (!r.ok()) return fail(r.status().code() == StatusCode::kInvalidArgument ? kUsage : kJobFailed, r.status().message());
  // Under mpirun one summary, the process that publishes checkpoints (the others named the one
  // they resumed from, and `| tail -1` read whichever came last).
  if (const auto env = launch_env(); !env.ok() || env->rank == 0) progress.summary(summary_of(*r));
  mpi_finalize();  // under mpirun, once every rank has succeeded (a failure exits without it)
  return kOk;
}

}  // namespace mt::cli

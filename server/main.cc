// megatraind: parse flags, start the daemon, wait for SIGTERM/SIGINT, stop gracefully.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "engine/base/omp_wait_policy.h"
#include "server/daemon.h"

#ifdef MEGATRAIN_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#else
static int sd_notify(int, const char*) { return 0; }
#endif

int main(int argc, char** argv) {
  mt::use_passive_omp_wait_policy(argv);
  // Block the stop signals in every thread; one waits for them below with sigwait.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // A file grown past RLIMIT_FSIZE (LimitFSIZE=, ulimit -f) fails its write with EFBIG, which
  // fails that job's checkpoint naming the file, instead of SIGXFSZ ending the daemon.
  signal(SIGXFSZ, SIG_IGN);

  auto cfg = mt::server::config_from_command_line(argc, argv);
  if (!cfg.ok()) {
    std::fprintf(stderr, "megatraind: %s\n", cfg.status().to_string().c_str());
    return 2;
  }
  // The log on stderr (spdlog's default logger writes to stdout), as the README and journald's
  // priority-less capture expect; Daemon::start adds STATE_DIR/daemon.log beside it.
  spdlog::set_default_logger(spdlog::stderr_color_mt("megatraind"));
  spdlog::set_level(spdlog::level::from_str(cfg->log_level));
  auto daemon = mt::server::Daemon::start(*cfg);
  if (!daemon.ok()) {
    std::fprintf(stderr, "megatraind: %s\n", daemon.status().to_string().c_str());
    return 1;
  }
  sd_notify(0, "READY=1\nSTATUS=serving");

  // Waits for a stop signal, or for a job to lose the device (a sticky CUDA error leaves this
  // process's context unusable: only a new process can run on the GPU again).
  for (;;) {
    timespec tick{0, 200 * 1000 * 1000};
    const int sig = sigtimedwait(&stop_signals, nullptr, &tick);
    if (sig > 0) {
      spdlog::info("signal {}: stopping (checkpointing the running job)", sig);
      break;
    }
    if (const mt::Status fault = (*daemon)->device_fault(); !fault.ok()) {
      spdlog::error("the device was lost ({}); stopping, to exit {} for a restart in a fresh process",
                    fault.to_string(), mt::server::Daemon::kExitDeviceLost);
      break;
    }
  }
  sd_notify(0, "STOPPING=1");
  const auto timeout = std::chrono::milliseconds(int64_t(cfg->shutdown_timeout_s * 1000));
  if (!(*daemon)->stop(timeout)) {
    // The job did not reach a step boundary in time; it resumes from its previous checkpoint.
    // Pushed data is fsynced on every append, so nothing acknowledged is lost.
    spdlog::warn("the running job did not stop within {} s; exiting without its checkpoint", cfg->shutdown_timeout_s);
    const int code = (*daemon)->exit_code();
    spdlog::shutdown();
    _exit(code);
  }
  const int code = (*daemon)->exit_code();
  daemon->reset();
  spdlog::info("stopped (exit status {})", code);
  return code;
}

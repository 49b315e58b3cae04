// megatraind: parse flags, start the daemon, wait for SIGTERM/SIGINT, stop gracefully.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

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

  auto cfg = mt::server::config_from_command_line(argc, argv);
  if (!cfg.ok()) {
    std::fprintf(stderr, "megatraind: %s\n", cfg.status().to_string().c_str());
    return 2;
  }
  spdlog::set_level(spdlog::level::from_str(cfg->log_level));
  auto daemon = mt::server::Daemon::start(*cfg);
  if (!daemon.ok()) {
    std::fprintf(stderr, "megatraind: %s\n", daemon.status().to_string().c_str());
    return 1;
  }
  sd_notify(0, "READY=1\nSTATUS=serving");

  int sig = 0;
  sigwait(&stop_signals, &sig);
  spdlog::info("signal {}: stopping (checkpointing the running job)", sig);
  sd_notify(0, "STOPPING=1");
  const auto timeout = std::chrono::milliseconds(int64_t(cfg->shutdown_timeout_s * 1000));
  if (!(*daemon)->stop(timeout)) {
    // The job did not reach a step boundary in time; it resumes from its previous checkpoint.
    // Pushed data is fsynced on every append, so nothing acknowledged is lost.
    spdlog::warn("the running job did not stop within {} s; exiting without its checkpoint", cfg->shutdown_timeout_s);
    spdlog::shutdown();
    _exit(0);
  }
  daemon->reset();
  spdlog::info("stopped");
  return 0;
}

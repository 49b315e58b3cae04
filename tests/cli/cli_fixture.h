// The CLI tests run the real binaries: build/bin/megatraind as a spawned daemon (free loopback
// ports, a temporary state directory, always stopped) and build/bin/megatrain as a subprocess
// with bounded time, its exit code, stdout and stderr captured.
#pragma once
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/base/json.h"
#include "tests/test_paths.h"

namespace mt::cli::testing {

namespace fs = std::filesystem;

struct RunResult {
  int rc = -1;  // exit code; -1 when killed (timeout or signal)
  std::string out, err;
  std::vector<Json> json_lines() const;  // stdout, one JSON object per line
};

inline std::vector<Json> RunResult::json_lines() const {
  std::vector<Json> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    auto j = Json::parse(line);
    EXPECT_TRUE(j.ok()) << "not a JSON line: " << line;
    if (j.ok()) lines.push_back(*j);
  }
  return lines;
}

inline std::string describe(const RunResult& r) {
  return "rc " + std::to_string(r.rc) + "\n--- stdout ---\n" + r.out + "--- stderr ---\n" + r.err;
}

// Runs `argv` (argv[0] is the program) with `env` set and the MEGATRAIN_* variables of the test's
// own environment removed; kills it after `timeout_s`.
inline RunResult run_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {},
                             double timeout_s = 120) {
  int out_pipe[2], err_pipe[2];
  if (::pipe(out_pipe) != 0 || ::pipe(err_pipe) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
    for (const char* v : {"MEGATRAIN_SERVER", "MEGATRAIN_TLS_CA", "MEGATRAIN_TOKEN_FILE"}) ::unsetenv(v);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  RunResult r;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  bool killed = false;
  for (int open = 2; open > 0;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 && !killed) {
      ::kill(pid, SIGKILL);
      killed = true;
      ADD_FAILURE() << argv[1] << ": timed out after " << timeout_s << " s";
    }
    if (::poll(fds, 2, killed ? 1000 : int(std::min<int64_t>(left.count(), 1000))) < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        (i == 0 ? r.out : r.err).append(buf, size_t(n));
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open;
      }
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// megatrain ARGS...
inline RunResult megatrain(std::vector<std::string> args, const std::map<std::string, std::string>& env = {},
                           double timeout_s = 120) {
  args.insert(args.begin(), mt::testing_util::megatrain_cli());
  return run_process(args, env, timeout_s);
}

inline std::string fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("mt_cli_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

inline std::string write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// `megatrain train SPEC --json --out RUN` killed with SIGKILL once it has reported step `at`.
// Reading step `at` and then killing raced the run's end (a tiny step takes ~4 ms; CI lost that
// race). So the test holds the run instead: its stdout is a pipe of one page of which the test
// keeps the write end too, and on reading step `at` fills what is left of the page; the run then
// blocks printing its next step until the kill. A run stalled that way is killed at most a
// page of step lines (~13 steps) past `at`, however late the kill comes. `step` is the last step
// reported, -1 when the run was not killed (it ended before reporting step `at`). Another
// `signal` is sent every `press_ms` until the run ends by it (Ctrl-C pressed until the run gives
// up), for at most 20 s; then it is killed, and `step` stays -1.
struct KilledRun {
  long step = -1;
  std::string seen;        // what it printed
  double signalled_s = 0;  // from the first signal to the run's end
  int exit_code = -1;      // when it exited instead of being ended by a signal
};

inline KilledRun train_and_kill(const std::string& spec, const std::string& run, long at, int signal = SIGKILL,
                                int press_ms = 200) {
  KilledRun k;
  int out[2];
  if (::pipe(out) != 0) return k;
  ::fcntl(out[1], F_SETPIPE_SZ, 4096);  // the smallest a pipe gets
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, STDERR_FILENO);
    ::close(out[0]);
    ::close(out[1]);
    std::string bin = mt::testing_util::megatrain_cli(), train = "train", json = "--json", o = "--out", r = run, sp = spec;
    char* args[] = {bin.data(), train.data(), sp.data(), json.data(), o.data(), r.data(), nullptr};
    ::execv(args[0], args);
    ::_exit(127);
  }
  // The test's write end: a file of its own on the pipe, so that only it is non-blocking. It
  // keeps read() from seeing an end: a run that ends is seen by waitpid.
  const int filler = ::open(("/proc/self/fd/" + std::to_string(out[1])).c_str(), O_WRONLY | O_NONBLOCK);
  ::close(out[1]);
  if (filler < 0) ADD_FAILURE() << "cannot open the pipe's write end again through /proc/self/fd";
  long step = 0;
  int status = 0;
  bool ended = false;
  while (step < at && !ended) {
    pollfd in{out[0], POLLIN, 0};
    if (::poll(&in, 1, 50) > 0) {
      char buf[4096];
      const ssize_t n = ::read(out[0], buf, sizeof buf);
      if (n > 0) k.seen.append(buf, size_t(n));
      for (size_t p = k.seen.find("\"step\":"); p != std::string::npos; p = k.seen.find("\"step\":", p + 1))
        step = std::max(step, std::atol(k.seen.c_str() + p + 7));
    } else {
      ended = ::waitpid(pid, &status, WNOHANG) == pid;
    }
  }
  // Fill the page a byte at a time (a non-blocking write of more than is free writes nothing).
  while (!ended && ::write(filler, " ", 1) == 1) {
  }
  const auto first = std::chrono::steady_clock::now();
  for (int tries = 0; !ended && signal != SIGKILL && tries < 20'000 / press_ms; ++tries) {
    ::kill(pid, signal);
    for (int waited = 0; !ended && waited < press_ms; waited += 5) {
      ::usleep(5'000);
      ended = ::waitpid(pid, &status, WNOHANG) == pid;
    }
  }
  k.signalled_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - first).count();
  if (!ended) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  if (WIFSIGNALED(status) && WTERMSIG(status) == signal) k.step = step;
  if (WIFEXITED(status)) k.exit_code = WEXITSTATUS(status);
  ::close(out[0]);
  ::close(filler);
  return k;
}

// A loopback port nothing listens on (bound to port 0, then released).
inline int unused_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

// The tiny preset on the CPU backend, a few quick steps (YAML, as a user writes it).
inline std::string tiny_spec_yaml(long steps, const std::string& data = "{source: synthetic, seed: 1}") {
  return "name: cli-test\n"
         "model: {preset: tiny}\n"
         "init: {seed: 1}\n"
         "data: " + data + "\n"
         "seq_len: 32\n"
         "micro_batch: 2\n"
         "global_batch: 4\n"
         "steps: " + std::to_string(steps) + "\n"
         "optimizer: {lr: 3.0e-3, betas: [0.9, 0.95], weight_decay: 0.0, grad_clip: 1.0}\n"
         "schedule: {warmup_steps: 2, decay: cosine, min_lr_ratio: 0.1}\n"
         "checkpoint: {every: 0, keep: 2}\n"
         "backend: cpu\n";
}

// A real megatraind on free loopback ports (port 0; the bound ports are read back from
// STATE/megatraind.json) with a temporary state directory; SIGTERM (then SIGKILL) at the end.
class DaemonProcess {
 public:
  explicit DaemonProcess(const std::string& name, std::vector<std::string> extra_flags = {})
      : state_(fresh_dir(name)) {
    log_ = state_ + "/megatraind.log";
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      std::vector<std::string> a = {mt::testing_util::megatraind(), "--state_dir=" + state_, "--listen=127.0.0.1:0",
                                    "--metrics_listen=127.0.0.1:0", "--host_memory=8G", "--log_level=warning"};
      a.insert(a.end(), extra_flags.begin(), extra_flags.end());
      std::vector<char*> args;
      for (auto& s : a) args.push_back(s.data());
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (port_ == 0 && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      auto text = read_file(state_ + "/megatraind.json");
      if (!text.ok()) continue;
      auto j = Json::parse(*text);
      if (j.ok() && j->find("pid") && j->find("pid")->as_int() == pid_) {
        port_ = int(j->find("port")->as_int());
        metrics_port_ = int(j->find("metrics_port")->as_int());
      }
    }
    if (port_ == 0) ADD_FAILURE() << "megatraind did not start:\n" << log();
  }
  // Stops the daemon and removes its state directory, unless the test failed (kept to look at).
  ~DaemonProcess() {
    stop();
    if (!::testing::Test::HasFailure()) {
      std::error_code ec;
      fs::remove_all(state_, ec);
    }
  }
  // SIGTERM, 20 s for a graceful stop, then SIGKILL.
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 200; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "megatraind ignored SIGTERM for 20 s";
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  bool ok() const { return port_ != 0; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int metrics_port() const { return metrics_port_; }
  const std::string& state_dir() const { return state_; }
  std::string data_root() const { return state_ + "/data"; }
  std::string log() const {
    auto t = read_file(log_);
    return t.ok() ? *t : "";
  }
  // megatrain ARGS... --server ADDRESS
  RunResult cli(std::vector<std::string> args, double timeout_s = 120) const {
    args.push_back("--server");
    args.push_back(address());
    return megatrain(std::move(args), {}, timeout_s);
  }

 private:
  std::string state_, log_;
  pid_t pid_ = -1;
  int port_ = 0, metrics_port_ = 0;
};

}  // namespace mt::cli::testing

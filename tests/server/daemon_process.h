// A real megatraind process on free loopback ports (read back from STATE/megatraind.json), for
// the tests that kill -9 a daemon or run two of them: a fresh object in the same process would
// not show what a crash leaves behind.
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "engine/base/json.h"
#include "tests/server/server_fixture.h"

namespace mt::server::testing {

inline std::string megatraind_path() {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "megatraind").string();
}

// Starts megatraind on `state` (stderr to `err_path` when given), its files limited to
// `file_size_limit` bytes (RLIMIT_FSIZE, as `ulimit -f` or systemd's LimitFSIZE= set it).
inline pid_t spawn_megatraind(const std::string& state, const std::string& err_path = "",
                              rlim_t file_size_limit = RLIM_INFINITY) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (!err_path.empty()) ::dup2(::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), STDERR_FILENO);
    const rlimit fsize{file_size_limit, file_size_limit};
    if (file_size_limit != RLIM_INFINITY && ::setrlimit(RLIMIT_FSIZE, &fsize) != 0) ::_exit(126);
    const std::string s = "--state_dir=" + state;
    ::execl(megatraind_path().c_str(), "megatraind", s.c_str(), "--listen=127.0.0.1:0",
            "--metrics_listen=127.0.0.1:0", "--host_memory=8G", "--log_level=warning", nullptr);
    ::_exit(127);
  }
  return pid;
}

struct Process {
  pid_t pid = -1;
  int port = 0;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Trainer::Stub> stub;

  explicit Process(const std::string& state, rlim_t file_size_limit = RLIM_INFINITY) {
    std::filesystem::remove(state + "/megatraind.json");
    pid = spawn_megatraind(state, "", file_size_limit);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < end && port == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      auto text = read_file(state + "/megatraind.json");
      if (!text.ok()) continue;
      auto j = Json::parse(*text);
      if (j.ok() && j->find("pid") && j->find("pid")->as_int() == pid) port = int(j->find("port")->as_int());
    }
    channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
    stub = v1::Trainer::NewStub(channel);
  }
  void kill9() {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    pid = -1;
  }
  int term() {
    ::kill(pid, SIGTERM);
    int status = 0;
    ::waitpid(pid, &status, 0);
    pid = -1;
    return status;
  }
  ~Process() {
    if (pid > 0) kill9();
  }
};


// Runs megatraind on `state` expecting it to exit (within `seconds`); its exit status and stderr.
struct Exited {
  int status = -1;
  std::string err;
};
inline Exited run_megatraind_to_exit(const std::string& state, double seconds = 20) {
  const std::string err_path = state + "/second-megatraind.err";
  const pid_t pid = spawn_megatraind(state, err_path);
  Exited out;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(seconds * 1000));
  while (::waitpid(pid, &out.status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > end) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &out.status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  auto text = read_file(err_path);
  if (text.ok()) out.err = *text;
  return out;
}

}  // namespace mt::server::testing

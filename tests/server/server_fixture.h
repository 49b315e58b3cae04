// An in-process megatraind on free loopback ports, a client stub, and small helpers.
#pragma once
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "megatrain/v1/trainer.grpc.pb.h"
#include "server/daemon.h"

namespace mt::server::testing {

namespace v1 = megatrain::v1;

inline std::string fresh_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("mt_server_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

inline DaemonConfig test_config(const std::string& state_dir) {
  DaemonConfig c;
  c.listen = "127.0.0.1:0";
  c.metrics_listen = "127.0.0.1:0";
  c.state_dir = state_dir;
  c.data_root = state_dir + "/data";
  c.host_memory = 8ull << 30;
  c.device_memory = 0;
  c.max_message_bytes = 256 << 10;
  c.shutdown_timeout_s = 30;
  return c;
}

struct Server {
  std::unique_ptr<Daemon> daemon;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Trainer::Stub> stub;

  explicit Server(const DaemonConfig& cfg) {
    auto d = Daemon::start(cfg);
    if (!d.ok()) {
      ADD_FAILURE() << d.status().to_string();
      return;
    }
    daemon = std::move(d).value();
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(64 << 20);
    channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(daemon->port()),
                                        grpc::InsecureChannelCredentials(), args);
    stub = v1::Trainer::NewStub(channel);
  }
};

// The tiny preset on the CPU: a few quick steps.
inline v1::JobSpec tiny_spec(long steps, const std::string& source = "synthetic") {
  v1::JobSpec s;
  s.set_name("tiny-test");
  s.mutable_model()->set_preset("tiny");
  s.mutable_init()->set_seed(1);
  s.mutable_data()->set_source(source);
  s.set_seq_len(32);
  s.set_micro_batch(4);
  s.set_global_batch(4);
  s.set_steps(steps);
  s.mutable_optimizer()->set_lr(3e-3f);
  s.mutable_optimizer()->set_weight_decay(0.0f);
  s.set_backend("cpu");
  return s;
}

inline std::unique_ptr<grpc::ClientContext> ctx(double seconds = 30) {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(int64_t(seconds * 1000)));
  return c;
}

// DeleteJob of `id` (keep: its checkpoints moved to the data root); the call's status.
inline grpc::Status delete_job(v1::Trainer::Stub& stub, const std::string& id, bool keep, v1::DeleteJobResponse* resp) {
  v1::DeleteJobRequest req;
  req.set_job_id(id);
  req.set_keep_checkpoints(keep);
  auto c = ctx();
  return stub.DeleteJob(c.get(), req, resp);
}

inline bool terminal(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED || s == v1::JOB_STATE_CANCELLED;
}

// Polls GetJob until `pred` holds or the time is up; returns the last job seen.
template <typename Pred>
v1::Job wait_job(v1::Trainer::Stub& stub, const std::string& id, Pred pred, double seconds = 50) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(seconds * 1000));
  v1::Job job;
  for (;;) {
    v1::GetJobRequest req;
    req.set_job_id(id);
    auto c = ctx();
    grpc::Status st = stub.GetJob(c.get(), req, &job);
    if (st.ok() && pred(job)) return job;
    if (std::chrono::steady_clock::now() > end) return job;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

inline v1::Job wait_terminal(v1::Trainer::Stub& stub, const std::string& id, double seconds = 50) {
  return wait_job(stub, id, [](const v1::Job& j) { return terminal(j.state()); }, seconds);
}

// SubmitJob's status, and its reply in `resp` when given.
inline grpc::Status submit_status(v1::Trainer::Stub& stub, const v1::JobSpec& spec,
                                  v1::SubmitJobResponse* resp = nullptr) {
  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  v1::SubmitJobResponse ignored;
  auto c = ctx();
  return stub.SubmitJob(c.get(), req, resp ? resp : &ignored);
}

inline std::string submit(v1::Trainer::Stub& stub, const v1::JobSpec& spec) {
  v1::SubmitJobResponse resp;
  const grpc::Status st = submit_status(stub, spec, &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return resp.job().id();
}

// Plain HTTP GET on loopback (for /metrics).
inline std::string http_get(int port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return "";
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (::write(fd, req.data(), req.size()) != ssize_t(req.size())) {
    ::close(fd);
    return "";
  }
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
  ::close(fd);
  return out;
}

}  // namespace mt::server::testing

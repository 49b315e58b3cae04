// Helpers of the scheduling and housekeeping tests (issue 17): a watcher that records a job's
// events from its own thread, an in-process daemon with an injected run_job, the final
// checkpoint's tensors of a job, and an uninterrupted reference run.
#pragma once
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "server/job_queue.h"
#include "server/job_record.h"
#include "tests/server/server_fixture.h"

namespace mt::server::testing {

// Every event of one job's WatchJob stream, read in a thread of its own until the stream ends.
class Watcher {
 public:
  Watcher(v1::Trainer::Stub& stub, const std::string& id) : ctx_(ctx(300)) {
    v1::WatchJobRequest req;
    req.set_job_id(id);
    reader_ = stub.WatchJob(ctx_.get(), req);
    thread_ = std::thread([this] {
      v1::JobEvent ev;
      while (reader_->Read(&ev)) {
        std::lock_guard<std::mutex> lock(mu_);
        events_.push_back(ev);
        seen_.notify_all();
      }
      std::lock_guard<std::mutex> lock(mu_);
      ended_ = true;
      seen_.notify_all();
    });
  }
  ~Watcher() { join(); }
  // Waits for the end of the stream (the job's terminal event); the events seen.
  std::vector<v1::JobEvent> join() {
    if (thread_.joinable()) {
      thread_.join();
      reader_->Finish();
    }
    return events();
  }
  // Waits until the stream has delivered its first event (the job's state when the watch began):
  // only then is the watch registered with the daemon, so a change made afterwards reaches it.
  bool wait_first(std::chrono::seconds timeout = std::chrono::seconds(30)) {
    return wait_for([](const v1::JobEvent&) { return true; }, timeout);
  }
  std::vector<v1::JobEvent> events() {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }
  // Waits until the stream has delivered an event for which `pred` holds.
  template <typename Pred>
  bool wait_for(Pred pred, std::chrono::seconds timeout = std::chrono::seconds(30)) {
    std::unique_lock<std::mutex> lock(mu_);
    return seen_.wait_for(lock, timeout, [&] { return ended_ || std::any_of(events_.begin(), events_.end(), pred); }) &&
           std::any_of(events_.begin(), events_.end(), pred);
  }

 private:
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader_;
  std::mutex mu_;
  std::condition_variable seen_;
  std::vector<v1::JobEvent> events_;
  bool ended_ = false;
  std::thread thread_;
};

// The states of a job's events with repeats folded (RUNNING, QUEUED, RUNNING, SUCCEEDED), from
// its first run on: a watch that starts just after the submit may or may not see it QUEUED first.
inline std::vector<v1::JobState> state_changes(const std::vector<v1::JobEvent>& events) {
  std::vector<v1::JobState> out;
  for (const auto& ev : events)
    if ((out.empty() && ev.state() != v1::JOB_STATE_QUEUED) || (!out.empty() && out.back() != ev.state()))
      out.push_back(ev.state());
  return out;
}

// An in-process daemon whose jobs run through `run_job` (see JobManager::Options::run_job).
struct HookedServer {
  std::unique_ptr<Daemon> daemon;
  std::unique_ptr<v1::Trainer::Stub> stub;
  HookedServer(const DaemonConfig& cfg, std::function<Result<JobResult>(JobRunner&)> run_job) {
    auto d = Daemon::start(cfg, std::move(run_job));
    if (!d.ok()) {
      ADD_FAILURE() << d.status().to_string();
      return;
    }
    daemon = std::move(d).value();
    stub = v1::Trainer::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(daemon->port()), grpc::InsecureChannelCredentials()));
  }
};

inline std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The weights and the optimizer moments of a checkpoint directory, as bytes.
inline std::string checkpoint_tensors(const std::string& dir) {
  return file_bytes(dir + "/model.safetensors") + "|" + file_bytes(dir + "/optimizer.safetensors");
}

// `spec` run alone, from start to end, on a fresh daemon: its final checkpoint's tensors.
inline std::string uninterrupted_tensors(const v1::JobSpec& spec, const std::string& name) {
  Server s(test_config(fresh_dir(name)));
  if (!s.stub) return "";
  const std::string id = submit(*s.stub, spec);
  const v1::Job j = wait_terminal(*s.stub, id, 120);
  EXPECT_EQ(j.state(), v1::JOB_STATE_SUCCEEDED) << j.reason();
  return checkpoint_tensors(j.last_checkpoint());
}

// A one-step spec named "even-N" or "odd-N".
inline v1::JobSpec named_spec(int n) {
  v1::JobSpec s = tiny_spec(1);
  s.set_name((n % 2 ? "odd-" : "even-") + std::to_string(n));
  return s;
}

inline grpc::Status get_job(v1::Trainer::Stub& stub, const std::string& id, v1::Job* job) {
  v1::GetJobRequest req;
  req.set_job_id(id);
  auto c = ctx();
  return stub.GetJob(c.get(), req, job);
}

// PauseJob, ResumeJob or CancelJob of `id` (RPC: &v1::Trainer::Stub::PauseJob, ...); the reply,
// the call's failure recorded as a test failure.
template <typename Request>
v1::Job job_call(v1::Trainer::Stub& stub, grpc::Status (v1::Trainer::Stub::*rpc)(grpc::ClientContext*, const Request&, v1::Job*),
                 const std::string& id) {
  Request req;
  req.set_job_id(id);
  v1::Job reply;
  auto c = ctx();
  const grpc::Status st = (stub.*rpc)(c.get(), req, &reply);
  EXPECT_TRUE(st.ok()) << id << ": " << st.error_message();
  return reply;
}
inline v1::Job pause_job(v1::Trainer::Stub& s, const std::string& id) { return job_call(s, &v1::Trainer::Stub::PauseJob, id); }
inline v1::Job resume_job(v1::Trainer::Stub& s, const std::string& id) { return job_call(s, &v1::Trainer::Stub::ResumeJob, id); }
inline v1::Job cancel_job(v1::Trainer::Stub& s, const std::string& id) { return job_call(s, &v1::Trainer::Stub::CancelJob, id); }

}  // namespace mt::server::testing

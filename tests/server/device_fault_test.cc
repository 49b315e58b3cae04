// A job whose run ends with the device lost (StatusCode::kDeviceLost: the CUDA backend's sticky
// error, the process's context unusable; issue 18 point 6): the job stays RUNNING with the
// failing call as its reason, the daemon takes no further work and its exit status is non-zero
// (systemd restarts it), and the restarted daemon resumes the job. A job that loses the device
// in kMaxDeviceFaults runs fails instead of restarting forever. The fault is injected through
// the job manager's run hook, so this runs on the CPU.
#include <fstream>

#include "engine/base/json.h"
#include "tests/server/server_fixture.h"

namespace mt::server::testing {
namespace {

const char* kFault =
    "cudaEventSynchronize: cudaEventSynchronize failed: an illegal memory access was encountered "
    "(cudaErrorIllegalAddress)";

struct Running {
  std::unique_ptr<Daemon> daemon;
  std::unique_ptr<v1::Trainer::Stub> stub;
};

Running start(const std::string& dir, std::function<Result<JobResult>(JobRunner&)> run_job) {
  Running r;
  auto d = Daemon::start(test_config(dir), std::move(run_job));
  if (!d.ok()) {
    ADD_FAILURE() << d.status().to_string();
    return r;
  }
  r.daemon = std::move(d).value();
  r.stub = v1::Trainer::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(r.daemon->port()),
                                                    grpc::InsecureChannelCredentials()));
  return r;
}

Result<JobResult> lose_device(JobRunner&) { return device_lost(kFault); }

bool wait_fault(const Daemon& d, double seconds = 30) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(seconds * 1000));
  while (d.device_fault().ok() && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return !d.device_fault().ok();
}

Json record(const std::string& dir, const std::string& id) {
  std::ifstream f(dir + "/jobs/" + id + "/job.json");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto j = Json::parse(text);
  return j.ok() ? *j : Json::object();
}

TEST(ServerDeviceFault, DeviceLostExitsNonZeroAndTheJobResumesAfterRestart) {
  const std::string dir = fresh_dir("device_fault");
  std::string id;
  {
    Running s = start(dir, lose_device);
    ASSERT_TRUE(s.daemon);
    EXPECT_EQ(s.daemon->exit_code(), 0);
    id = submit(*s.stub, tiny_spec(3));
    ASSERT_TRUE(wait_fault(*s.daemon)) << "the daemon never saw the device fault";
    EXPECT_EQ(s.daemon->device_fault().code(), StatusCode::kDeviceLost);
    EXPECT_EQ(s.daemon->exit_code(), Daemon::kExitDeviceLost);
    EXPECT_NE(s.daemon->exit_code(), 0);

    const v1::Job job = wait_job(*s.stub, id, [](const v1::Job& j) { return !j.reason().empty(); }, 10);
    EXPECT_EQ(job.state(), v1::JOB_STATE_RUNNING) << "a lost device must leave the job resumable";
    EXPECT_NE(job.reason().find("cudaEventSynchronize"), std::string::npos) << job.reason();

    // No further work in this process: its CUDA context is gone.
    v1::SubmitJobRequest req;
    *req.mutable_spec() = tiny_spec(1);
    v1::SubmitJobResponse resp;
    auto c = ctx();
    EXPECT_EQ(s.stub->SubmitJob(c.get(), req, &resp).error_code(), grpc::StatusCode::UNAVAILABLE);

    // main()'s stop path: stops, and the exit status stays non-zero.
    EXPECT_TRUE(s.daemon->stop(std::chrono::milliseconds(10000)));
    EXPECT_EQ(s.daemon->exit_code(), Daemon::kExitDeviceLost);
  }
  const Json rec = record(dir, id);
  ASSERT_NE(rec.find("device_faults"), nullptr);
  EXPECT_EQ(rec.find("device_faults")->as_int(), 1);
  EXPECT_EQ(rec.find("state")->as_string(), "running");

  // The restarted daemon (a fresh process under systemd) resumes and finishes the job.
  Running s = start(dir, nullptr);
  ASSERT_TRUE(s.daemon);
  const v1::Job job = wait_terminal(*s.stub, id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.reason();
  EXPECT_TRUE(job.reason().empty()) << job.reason();
  EXPECT_EQ(s.daemon->exit_code(), 0);
}

TEST(ServerDeviceFault, JobFailsAfterMaxDeviceFaults) {
  const std::string dir = fresh_dir("device_fault_max");
  std::string id;
  for (int run = 1; run <= JobManager::kMaxDeviceFaults; ++run) {
    Running s = start(dir, lose_device);
    ASSERT_TRUE(s.daemon);
    if (run == 1) id = submit(*s.stub, tiny_spec(3));
    ASSERT_TRUE(wait_fault(*s.daemon)) << "run " << run;
    EXPECT_TRUE(s.daemon->stop(std::chrono::milliseconds(10000)));
    EXPECT_NE(s.daemon->exit_code(), 0);
  }
  const Json rec = record(dir, id);
  EXPECT_EQ(rec.find("state")->as_string(), "failed");
  EXPECT_EQ(rec.find("device_faults")->as_int(), JobManager::kMaxDeviceFaults);
  EXPECT_NE(rec.find("reason")->as_string().find("cudaEventSynchronize"), std::string::npos);
  // A restart does not run it again.
  Running s = start(dir, [](JobRunner&) -> Result<JobResult> {
    ADD_FAILURE() << "a failed job ran again";
    return JobResult{};
  });
  ASSERT_TRUE(s.daemon);
  const v1::Job job = wait_terminal(*s.stub, id, 5);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(s.daemon->exit_code(), 0);
}

}  // namespace
}  // namespace mt::server::testing

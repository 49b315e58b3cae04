// A devices: 2 job in megatraind (--devices 2): admitted only up to the devices the daemon owns,
// and when one device fails mid-step the job is reported FAILED with a reason naming it (the
// device's CPU backend gets an injected fault through the run hook).
#include <atomic>

#include "tests/server/server_fixture.h"

namespace mt::server::testing {
namespace {

TEST(ServerDataParallel, AFailedDeviceFailsTheJobNamingIt) {
  const std::string dir = fresh_dir("data_parallel_job");
  DaemonConfig cfg = test_config(dir);
  cfg.devices = 2;
  auto ops = std::make_shared<std::atomic<int>>(0);
  auto run_job = [ops](JobRunner& r) {
    auto made = std::make_shared<std::atomic<int>>(0);
    r.hooks().make_backend = [ops, made](const JobSpec&) -> Result<std::unique_ptr<Backend>> {
      CpuBackendOptions o;
      if ((*made)++ == 1)  // the second device: fails in its third step
        o.inject_fault = [ops](const char*) { return ++*ops > 400; };
      return make_cpu_backend(o);
    };
    return r.run();
  };
  auto d = Daemon::start(cfg, run_job);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  auto stub = v1::Trainer::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string((*d)->port()),
                                                       grpc::InsecureChannelCredentials()));
  v1::JobSpec spec = tiny_spec(50);
  spec.set_global_batch(8);
  spec.set_devices(2);
  const std::string id = submit(*stub, spec);
  const v1::Job job = wait_terminal(*stub, id, 120);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(job.reason().find("rank 1 failed"), std::string::npos) << job.reason();
  EXPECT_LT(job.step(), 50);

  // More devices than the daemon owns: refused at submit, naming the flag.
  spec.set_devices(4);
  spec.set_global_batch(16);
  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  v1::SubmitJobResponse resp;
  auto c = ctx();
  const grpc::Status st = stub->SubmitJob(c.get(), req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("--devices"), std::string::npos) << st.error_message();
  EXPECT_TRUE((*d)->stop(std::chrono::milliseconds(10000)));
}

}  // namespace
}  // namespace mt::server::testing

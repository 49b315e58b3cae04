// End to end against a real in-process megatraind on a loopback port.
#include <filesystem>
#include <random>

#include "server/push_spool.h"
#include "tests/server/server_fixture.h"

namespace mt::server::testing {
namespace {

TEST(ServerE2E, SyntheticJobWatchedToSuccessLowersLoss) {
  Server s(test_config(fresh_dir("synthetic")));
  ASSERT_TRUE(s.stub);
  const std::string id = submit(*s.stub, tiny_spec(40));
  ASSERT_FALSE(id.empty());

  v1::WatchJobRequest req;
  req.set_job_id(id);
  auto c = ctx(55);
  auto reader = s.stub->WatchJob(c.get(), req);
  v1::JobEvent ev, last;
  int step_events = 0;
  while (reader->Read(&ev)) {
    if (ev.step() > last.step()) ++step_events;
    last = ev;
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(last.state(), v1::JOB_STATE_SUCCEEDED) << last.reason();
  EXPECT_GT(step_events, 0);

  v1::Job job = wait_terminal(*s.stub, id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.reason();
  EXPECT_EQ(job.step(), 40);
  EXPECT_LT(job.loss(), job.first_loss() - 0.3) << "first " << job.first_loss() << " last " << job.loss();
  ASSERT_FALSE(job.last_checkpoint().empty());
  EXPECT_TRUE(std::filesystem::exists(job.last_checkpoint() + "/model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(job.last_checkpoint() + "/trainer_state.json"));
  EXPECT_EQ(job.spec().model().preset(), "tiny");
}

TEST(ServerE2E, PushFromConcurrentStreamsIsConsumedExactlyOnce) {
  Server s(test_config(fresh_dir("push")));
  ASSERT_TRUE(s.stub);
  const long steps = 4;
  const std::string id = submit(*s.stub, tiny_spec(steps, "push"));
  ASSERT_FALSE(id.empty());
  // Starved of data, the job waits instead of failing.
  v1::Job waiting = wait_job(*s.stub, id, [](const v1::Job& j) { return j.waiting_for_data(); });
  EXPECT_TRUE(waiting.waiting_for_data());
  EXPECT_EQ(waiting.state(), v1::JOB_STATE_RUNNING);

  const uint64_t need = uint64_t(steps) * 4 * 33;  // steps x global batch x (seq_len + 1)
  const int streams = 4;
  std::vector<uint64_t> sums(streams, 0), counts(streams, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < streams; ++k) {
    threads.emplace_back([&, k] {
      std::mt19937 rng(k);
      v1::PushDataResponse resp;
      auto c = ctx();
      auto writer = s.stub->PushData(c.get(), &resp);
      uint64_t left = need / streams;
      bool first = true;
      while (left) {
        v1::PushDataRequest chunk;
        if (first) chunk.set_job_id(id);
        first = false;
        const uint64_t n = std::min<uint64_t>(left, 1 + rng() % 40);
        for (uint64_t i = 0; i < n; ++i) {
          const uint32_t t = rng() % 256;
          chunk.add_tokens(t);
          sums[k] += token_checksum(t);
        }
        ASSERT_TRUE(writer->Write(chunk));
        left -= n;
      }
      writer->WritesDone();
      grpc::Status st = writer->Finish();
      ASSERT_TRUE(st.ok()) << st.error_message();
      counts[k] = resp.tokens_accepted();
    });
  }
  for (auto& t : threads) t.join();
  uint64_t sum = 0, count = 0;
  for (int k = 0; k < streams; ++k) sum += sums[k], count += counts[k];
  EXPECT_EQ(count, need);

  v1::Job job = wait_terminal(*s.stub, id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.reason();
  EXPECT_EQ(job.data_spooled_tokens(), need);
  EXPECT_EQ(job.data_consumed_tokens(), need);
  EXPECT_EQ(job.data_consumed_checksum(), sum);
}

TEST(ServerE2E, CancelQueuedAndRunningJobs) {
  Server s(test_config(fresh_dir("cancel")));
  ASSERT_TRUE(s.stub);
  const std::string running = submit(*s.stub, tiny_spec(100000));
  const std::string queued = submit(*s.stub, tiny_spec(5));
  wait_job(*s.stub, running, [](const v1::Job& j) { return j.step() >= 2; });

  v1::CancelJobRequest req;
  v1::Job out;
  req.set_job_id(queued);
  auto c1 = ctx();
  ASSERT_TRUE(s.stub->CancelJob(c1.get(), req, &out).ok());
  EXPECT_EQ(out.state(), v1::JOB_STATE_CANCELLED);

  // Checkpoint now, for the running job.
  v1::CheckpointRequest creq;
  creq.set_job_id(running);
  v1::CheckpointResponse cresp;
  auto c2 = ctx();
  grpc::Status cst = s.stub->Checkpoint(c2.get(), creq, &cresp);
  ASSERT_TRUE(cst.ok()) << cst.error_message();
  EXPECT_TRUE(std::filesystem::exists(cresp.checkpoint() + "/model.safetensors"));
  EXPECT_GT(cresp.step(), 0);

  req.set_job_id(running);
  auto c3 = ctx();
  ASSERT_TRUE(s.stub->CancelJob(c3.get(), req, &out).ok());
  v1::Job job = wait_terminal(*s.stub, running);
  EXPECT_EQ(job.state(), v1::JOB_STATE_CANCELLED) << job.reason();
  EXPECT_FALSE(job.last_checkpoint().empty());

  // A push job waiting for data cancels too.
  const std::string starving = submit(*s.stub, tiny_spec(3, "push"));
  wait_job(*s.stub, starving, [](const v1::Job& j) { return j.waiting_for_data(); });
  req.set_job_id(starving);
  auto c4 = ctx();
  ASSERT_TRUE(s.stub->CancelJob(c4.get(), req, &out).ok());
  EXPECT_EQ(wait_terminal(*s.stub, starving).state(), v1::JOB_STATE_CANCELLED);
}

TEST(ServerE2E, PlanJobRefusesAnOversizedModelWithTheNumbers) {
  Server s(test_config(fresh_dir("plan")));
  ASSERT_TRUE(s.stub);
  v1::JobSpec big = tiny_spec(10);
  big.mutable_model()->set_preset("llama3-70b");
  v1::PlanJobRequest req;
  *req.mutable_spec() = big;
  v1::PlanJobResponse resp;
  auto c = ctx();
  ASSERT_TRUE(s.stub->PlanJob(c.get(), req, &resp).ok());
  EXPECT_FALSE(resp.plan().fits());
  EXPECT_GT(resp.plan().host_bytes(), 8ull << 30);
  EXPECT_EQ(resp.plan().host_budget_bytes(), 8ull << 30);
  EXPECT_NE(resp.plan().reason().find_first_of("0123456789"), std::string::npos) << resp.plan().reason();

  v1::SubmitJobRequest sreq;
  *sreq.mutable_spec() = big;
  v1::SubmitJobResponse sresp;
  auto c2 = ctx();
  grpc::Status st = s.stub->SubmitJob(c2.get(), sreq, &sresp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("GiB"), std::string::npos) << st.error_message();

  *req.mutable_spec() = tiny_spec(10);
  auto c3 = ctx();
  ASSERT_TRUE(s.stub->PlanJob(c3.get(), req, &resp).ok());
  EXPECT_TRUE(resp.plan().fits());
  EXPECT_GT(resp.plan().params(), 0);
}

TEST(ServerE2E, JobsSurviveARestartAndAnInterruptedJobResumes) {
  const std::string dir = fresh_dir("restart");
  std::string done, interrupted;
  long stopped_at = 0;
  {
    Server s(test_config(dir));
    ASSERT_TRUE(s.stub);
    done = submit(*s.stub, tiny_spec(3));
    ASSERT_EQ(wait_terminal(*s.stub, done).state(), v1::JOB_STATE_SUCCEEDED);
    v1::JobSpec long_job = tiny_spec(100000);  // the default (streaming) executor resumes
    interrupted = submit(*s.stub, long_job);
    wait_job(*s.stub, interrupted, [](const v1::Job& j) { return j.step() >= 3; });
    ASSERT_TRUE(s.daemon->stop(std::chrono::seconds(30)));  // SIGTERM's path: checkpoint, stay RUNNING
  }
  Server s(test_config(dir));
  ASSERT_TRUE(s.stub);
  v1::ListJobsRequest lreq;
  v1::ListJobsResponse lresp;
  auto c = ctx();
  ASSERT_TRUE(s.stub->ListJobs(c.get(), lreq, &lresp).ok());
  ASSERT_EQ(lresp.jobs_size(), 2);
  EXPECT_EQ(lresp.jobs(0).id(), done);
  EXPECT_EQ(lresp.jobs(0).state(), v1::JOB_STATE_SUCCEEDED);
  stopped_at = lresp.jobs(1).step();
  EXPECT_GE(stopped_at, 3);
  // It resumes from its checkpoint, not from step 0.
  v1::Job j = wait_job(*s.stub, interrupted, [&](const v1::Job& x) { return x.step() > stopped_at; });
  EXPECT_GT(j.step(), stopped_at);
  EXPECT_EQ(j.state(), v1::JOB_STATE_RUNNING);
  v1::CancelJobRequest req;
  req.set_job_id(interrupted);
  v1::Job out;
  auto c2 = ctx();
  ASSERT_TRUE(s.stub->CancelJob(c2.get(), req, &out).ok());
  EXPECT_EQ(wait_terminal(*s.stub, interrupted).state(), v1::JOB_STATE_CANCELLED);
}

}  // namespace
}  // namespace mt::server::testing

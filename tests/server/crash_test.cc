// kill -9 the daemon (a real megatraind process) during a push job, restart it: the job resumes
// from its checkpoint and no acknowledged token is lost or repeated.
#include <fstream>
#include <random>

#include "engine/base/json.h"
#include "server/push_spool.h"
#include "tests/server/daemon_process.h"

namespace mt::server::testing {
namespace {

uint64_t push(v1::Trainer::Stub& stub, const std::string& id, uint64_t n, std::mt19937& rng, uint64_t& sum) {
  v1::PushDataResponse resp;
  auto c = ctx();
  auto w = stub.PushData(c.get(), &resp);
  uint64_t local = 0;
  for (uint64_t left = n; left;) {
    v1::PushDataRequest chunk;
    chunk.set_job_id(id);
    const uint64_t k = std::min<uint64_t>(left, 50);
    for (uint64_t i = 0; i < k; ++i) {
      const uint32_t t = rng() % 256;
      chunk.add_tokens(t);
      local += token_checksum(t);
    }
    if (!w->Write(chunk)) break;
    left -= k;
  }
  w->WritesDone();
  if (!w->Finish().ok()) return 0;
  sum += local;  // acknowledged
  return resp.tokens_accepted();
}

TEST(ServerCrash, KillNineDuringAPushJobLosesAndRepeatsNothing) {
  if (!std::filesystem::exists(megatraind_path())) GTEST_SKIP() << "megatraind not built";
  const std::string state = fresh_dir("crash");
  const uint64_t per_step = 4 * 33;
  v1::JobSpec spec = tiny_spec(6, "push");
  spec.mutable_checkpoint()->set_every(1);
  std::mt19937 rng(5);
  uint64_t sum = 0, acked = 0;
  std::string id;
  {
    Process p(state);
    ASSERT_GT(p.port, 0);
    id = submit(*p.stub, spec);
    ASSERT_FALSE(id.empty());
    acked += push(*p.stub, id, 3 * per_step + 20, rng, sum);
    ASSERT_EQ(acked, 3 * per_step + 20);
    v1::Job j = wait_job(*p.stub, id, [](const v1::Job& x) { return x.step() >= 3 && x.waiting_for_data(); });
    ASSERT_EQ(j.step(), 3);
    p.kill9();
  }
  Process p(state);
  ASSERT_GT(p.port, 0);
  v1::Job j = wait_job(*p.stub, id, [](const v1::Job& x) { return x.waiting_for_data(); });
  EXPECT_EQ(j.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(j.data_spooled_tokens(), acked);
  EXPECT_EQ(j.data_consumed_tokens(), 3 * per_step);
  acked += push(*p.stub, id, 3 * per_step - 20, rng, sum);
  j = wait_terminal(*p.stub, id);
  ASSERT_EQ(j.state(), v1::JOB_STATE_SUCCEEDED) << j.reason();
  EXPECT_EQ(j.data_consumed_tokens(), 6 * per_step);
  EXPECT_EQ(j.data_consumed_checksum(), sum);
  // SIGTERM exits 0.
  const int status = p.term();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  // The finished job still reports what it consumed after another restart.
  Process again(state);
  ASSERT_GT(again.port, 0);
  j = wait_terminal(*again.stub, id);
  EXPECT_EQ(j.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(j.data_consumed_tokens(), 6 * per_step);
  EXPECT_EQ(j.data_consumed_checksum(), sum);
}

}  // namespace
}  // namespace mt::server::testing

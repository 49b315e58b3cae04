// kill -9 a real megatraind while a client follows a job's log: the follower's stream ends (it
// does not hang), every line it was sent is in the log the restarted daemon serves, and the
// log goes on after the restart (the interruption noted) to the job's end.
#include <atomic>
#include <chrono>
#include <thread>

#include "tests/server/daemon_process.h"

namespace mt::server::testing {
namespace {

std::vector<std::string> texts(v1::Trainer::Stub& stub, const std::string& id, bool follow,
                               grpc::ClientContext* c, grpc::Status* status,
                               std::atomic<size_t>* received = nullptr) {
  v1::StreamLogsRequest req;
  req.set_job_id(id);
  req.set_follow(follow);
  auto reader = stub.StreamLogs(c, req);
  std::vector<std::string> out;
  v1::StreamLogsResponse msg;
  while (reader->Read(&msg)) {
    for (const auto& l : msg.lines()) out.push_back(l.text());
    if (received) *received = out.size();
  }
  *status = reader->Finish();
  return out;
}

TEST(ServerLogsCrash, KillNineWhileFollowingLosesNoLineSent) {
  if (!std::filesystem::exists(megatraind_path())) GTEST_SKIP() << "megatraind not built";
  const std::string state = fresh_dir("logs_crash");
  v1::JobSpec spec = tiny_spec(120);
  spec.mutable_checkpoint()->set_every(20);
  std::string id;
  std::vector<std::string> before;
  grpc::Status cut;
  {
    Process p(state);
    ASSERT_GT(p.port, 0);
    id = submit(*p.stub, spec);
    ASSERT_FALSE(id.empty());
    std::atomic<size_t> received{0};
    std::thread follower([&] {
      auto c = ctx(120);
      before = texts(*p.stub, id, true, c.get(), &cut, &received);
    });
    // Killed once the follower holds 30 lines (not once the job reports step 30: the stream may
    // lag the job by a few lines).
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (received < 30 && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    p.kill9();
    follower.join();  // returns: the stream ended with the daemon
  }
  EXPECT_FALSE(cut.ok());
  EXPECT_EQ(cut.error_code(), grpc::StatusCode::UNAVAILABLE) << cut.error_message();
  ASSERT_GE(before.size(), 30u);

  Process p(state);
  ASSERT_GT(p.port, 0);
  auto c = ctx(120);
  grpc::Status st;
  const std::vector<std::string> after = texts(*p.stub, id, true, c.get(), &st);  // to the job's end
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_GT(after.size(), before.size());
  // Every line the follower was sent before the kill is in the log, in order, as its start.
  for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(after[i], before[i]) << i;
  bool resumed = false;
  for (size_t i = before.size(); i < after.size(); ++i) resumed |= after[i].find("resuming after a daemon restart") != std::string::npos;
  EXPECT_TRUE(resumed);
  EXPECT_EQ(after.back(), "job succeeded: finished");
  EXPECT_EQ(wait_terminal(*p.stub, id).state(), v1::JOB_STATE_SUCCEEDED);
}

}  // namespace
}  // namespace mt::server::testing

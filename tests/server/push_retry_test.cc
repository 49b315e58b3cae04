// Issue 11 (12): pushes are exactly-once under retry. A stream that dies part-way (the client
// cancels it, a chunk is refused) and is retried under the same push id spools every token once.
#include <numeric>

#include "server/push_spool.h"
#include "tests/server/schedule_util.h"

namespace mt::server::testing {
namespace {

constexpr uint64_t kPerStep = 4 * 33;  // tiny_spec: 4 sequences of seq_len + 1 tokens a step

std::vector<uint32_t> make_tokens(size_t n) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = uint32_t((i * 31 + i / 7) % 256);
  return t;
}

uint64_t checksum(const std::vector<uint32_t>& t) {
  uint64_t s = 0;
  for (uint32_t x : t) s += token_checksum(x);
  return s;
}

v1::PushDataRequest chunk(const std::string& job, const std::string& push_id, const std::vector<uint32_t>& t,
                          size_t from, size_t n) {
  v1::PushDataRequest c;
  c.set_job_id(job);
  c.set_push_id(push_id);
  c.set_offset(from);
  c.mutable_tokens()->Add(t.begin() + ptrdiff_t(from), t.begin() + ptrdiff_t(from + n));
  return c;
}

v1::Job job_of(v1::Trainer::Stub& stub, const std::string& id) {
  return wait_job(stub, id, [](const v1::Job&) { return true; });
}

// Streams t[from..] in chunks of `step`. With cancel_after > 0, it stops after that many chunks,
// waits until the daemon has spooled some of them, and cancels the call (a dropped connection).
grpc::Status push(v1::Trainer::Stub& stub, const std::string& job, const std::string& push_id,
                  const std::vector<uint32_t>& t, size_t from, size_t step, v1::PushDataResponse& resp,
                  size_t cancel_after = 0) {
  auto c = ctx();
  auto w = stub.PushData(c.get(), &resp);
  size_t sent = 0;
  for (size_t at = from; at < t.size() && (!cancel_after || sent < cancel_after); at += step, ++sent)
    if (!w->Write(chunk(job, push_id, t, at, std::min(step, t.size() - at)))) break;
  if (!cancel_after) {
    w->WritesDone();
    return w->Finish();
  }
  wait_job(stub, job, [&](const v1::Job& j) { return j.data_spooled_tokens() >= step * cancel_after / 2; });
  c->TryCancel();
  return w->Finish();
}

// How far a push got: a stream of one empty chunk naming it.
uint64_t committed(v1::Trainer::Stub& stub, const std::string& job, const std::string& push_id) {
  v1::PushDataResponse resp;
  auto c = ctx();
  auto w = stub.PushData(c.get(), &resp);
  v1::PushDataRequest probe;
  probe.set_job_id(job);
  probe.set_push_id(push_id);
  w->Write(probe);
  w->WritesDone();
  grpc::Status st = w->Finish();
  EXPECT_TRUE(st.ok()) << st.error_message();
  return resp.push_committed_tokens();
}

TEST(ServerPush, StreamCancelledMidwayThenRetriedSpoolsEachTokenOnce) {
  Server s(test_config(fresh_dir("push_cancel")));
  ASSERT_TRUE(s.stub);
  const auto tokens = make_tokens(10 * kPerStep);
  const std::string id = submit(*s.stub, tiny_spec(10, "push"));
  v1::PushDataResponse resp;
  grpc::Status st = push(*s.stub, id, "upload-a", tokens, 0, 100, resp, /*cancel_after=*/6);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::CANCELLED) << st.error_message();
  // The client's Finish returns at once; the daemon may still spool a chunk that was in flight
  // when the call was cancelled (CI saw 300 then 400). So what the push holds only grows while
  // it is read, and the retry below must skip exactly that much whenever it lands.
  const uint64_t before = job_of(*s.stub, id).data_spooled_tokens();
  const uint64_t have = committed(*s.stub, id, "upload-a");
  const uint64_t after = job_of(*s.stub, id).data_spooled_tokens();
  EXPECT_GE(before, 300u);
  EXPECT_LE(after, 600u);
  EXPECT_EQ(have % 100, 0u);
  EXPECT_LE(before, have);
  EXPECT_LE(have, after);

  // The retry sends everything again from offset 0: what the first try spooled is skipped.
  st = push(*s.stub, id, "upload-a", tokens, 0, 100, resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(resp.push_committed_tokens(), tokens.size());
  EXPECT_EQ(resp.spooled_tokens(), tokens.size());
  const v1::Job j = wait_terminal(*s.stub, id);
  ASSERT_EQ(j.state(), v1::JOB_STATE_SUCCEEDED) << j.reason();
  EXPECT_EQ(j.data_spooled_tokens(), tokens.size());
  EXPECT_EQ(j.data_consumed_tokens(), tokens.size());
  EXPECT_EQ(j.data_consumed_checksum(), checksum(tokens));
}

// The case: a bad token at index 2500 fails the push after 2000 tokens were spooled; the
// fixed file pushed again under the same id resumes where the push stopped.
TEST(ServerPush, RefusedChunkThenResumedPushSpoolsEachTokenOnce) {
  Server s(test_config(fresh_dir("push_refused")));
  ASSERT_TRUE(s.stub);
  auto tokens = make_tokens(25 * kPerStep);  // 3300
  const std::string id = submit(*s.stub, tiny_spec(25, "push"));
  tokens[2500] = 999;
  v1::PushDataResponse resp;
  grpc::Status st = push(*s.stub, id, "upload-b", tokens, 0, 1000, resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("tokens[500] = 999"), std::string::npos) << st.error_message();
  const uint64_t have = committed(*s.stub, id, "upload-b");
  EXPECT_EQ(have, 2000u);

  tokens[2500] = 7;
  v1::PushDataResponse gap;  // resuming past what the push holds is refused, naming where to resume
  st = push(*s.stub, id, "upload-b", tokens, 3000, 1000, gap);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("resume at offset 2000"), std::string::npos) << st.error_message();
  st = push(*s.stub, id, "upload-b", tokens, have, 1000, resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(resp.tokens_accepted(), tokens.size() - have);
  EXPECT_EQ(resp.push_committed_tokens(), tokens.size());
  const v1::Job j = wait_terminal(*s.stub, id);
  ASSERT_EQ(j.state(), v1::JOB_STATE_SUCCEEDED) << j.reason();
  EXPECT_EQ(j.data_spooled_tokens(), tokens.size());
  EXPECT_EQ(j.data_consumed_checksum(), checksum(tokens));
}

TEST(ServerPush, MalformedPushPositionsAreRefused) {
  Server s(test_config(fresh_dir("push_positions")));
  ASSERT_TRUE(s.stub);
  const std::string id = submit(*s.stub, tiny_spec(10, "push"));
  const auto tokens = make_tokens(300);
  auto one = [&](std::vector<v1::PushDataRequest> chunks) {
    v1::PushDataResponse resp;
    auto c = ctx();
    auto w = s.stub->PushData(c.get(), &resp);
    for (auto& ch : chunks)
      if (!w->Write(ch)) break;
    w->WritesDone();
    return w->Finish();
  };
  auto bad = chunk(id, "", tokens, 100, 100);  // an offset without a push id
  grpc::Status st = one({bad});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("needs a push_id"), std::string::npos) << st.error_message();
  auto skip = chunk(id, "p", tokens, 200, 100);  // chunks must follow on
  skip.clear_job_id();
  skip.clear_push_id();
  st = one({chunk(id, "p", tokens, 0, 100), skip});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("expected 100"), std::string::npos) << st.error_message();
  st = one({chunk(id, std::string(129, 'x'), tokens, 0, 100)});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(job_of(*s.stub, id).data_spooled_tokens(), 100u);  // only the one good chunk
}

// A push to a push job that ended is refused saying it ended, after a daemon restart too (the
// restart opens no spool for it, and the refusal said its source was not push).
TEST(ServerPush, APushToAnEndedJobSaysItEndedAfterARestart) {
  const std::string state = fresh_dir("push_ended_restart");
  std::string id;
  {
    Server s(test_config(state));
    ASSERT_TRUE(s.stub);
    id = submit(*s.stub, tiny_spec(3, "push"));
    cancel_job(*s.stub, id);  // its failure is a test failure
  }
  Server s(test_config(state));
  ASSERT_TRUE(s.stub);
  v1::PushDataResponse resp;
  const grpc::Status st = push(*s.stub, id, "p", std::vector<uint32_t>(10, 1), 0, 10, resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
  EXPECT_NE(st.error_message().find("is cancelled"), std::string::npos) << st.error_message();
}

}  // namespace
}  // namespace mt::server::testing

// WatchJob from_start: a watch that begins after the job has stepped (or ended) still gets every
// step and evaluation, once each and in order, then the job's state; the daemon keeps a bounded
// history (EventHistory) and a plain watch is as before.
#include "server/event_history.h"
#include "server/watch_backlog.h"
#include "tests/server/server_fixture.h"

namespace mt::server::testing {
namespace {

std::vector<v1::JobEvent> watch_all(v1::Trainer::Stub& stub, const std::string& id, bool from_start) {
  v1::WatchJobRequest req;
  req.set_job_id(id);
  req.set_from_start(from_start);
  auto c = ctx(55);
  auto reader = stub.WatchJob(c.get(), req);
  std::vector<v1::JobEvent> out;
  v1::JobEvent ev;
  while (reader->Read(&ev)) out.push_back(ev);
  EXPECT_TRUE(reader->Finish().ok());
  return out;
}

bool is_step(const v1::JobEvent& e) {
  return e.state() == v1::JOB_STATE_RUNNING && e.message().empty() && e.checkpoint().empty() && !e.has_eval_loss() &&
         e.step() > 0;
}

TEST(ServerWatch, FromStartReplaysEveryStepAndEvaluationOfAJobThatEndedBeforeTheWatch) {
  Server s(test_config(fresh_dir("watch_from_start")));
  ASSERT_TRUE(s.stub);
  v1::JobSpec spec = tiny_spec(6);
  spec.mutable_eval()->mutable_data()->set_source("synthetic");
  spec.mutable_eval()->set_every(3);
  spec.mutable_eval()->set_max_tokens(256);
  const std::string id = submit(*s.stub, spec);
  ASSERT_EQ(wait_terminal(*s.stub, id).state(), v1::JOB_STATE_SUCCEEDED);

  const auto plain = watch_all(*s.stub, id, false);  // the state only: the job is over
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_EQ(plain[0].state(), v1::JOB_STATE_SUCCEEDED);

  const auto all = watch_all(*s.stub, id, true);
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.back().state(), v1::JOB_STATE_SUCCEEDED);
  std::vector<long> steps, evals;
  for (const auto& e : all) {
    if (is_step(e)) steps.push_back(long(e.step()));
    if (e.has_eval_loss()) evals.push_back(long(e.step()));
  }
  EXPECT_EQ(steps, (std::vector<long>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(evals, (std::vector<long>{3, 6}));
  for (const auto& e : all) {
    if (is_step(e)) {
      EXPECT_GT(e.loss(), 0) << e.step();
    }
  }
}

TEST(ServerWatch, FromStartOfAnUnknownJobIsNotFound) {
  Server s(test_config(fresh_dir("watch_unknown")));
  ASSERT_TRUE(s.stub);
  v1::WatchJobRequest req;
  req.set_job_id("job-424242");
  req.set_from_start(true);
  auto c = ctx(10);
  auto reader = s.stub->WatchJob(c.get(), req);
  v1::JobEvent ev;
  EXPECT_FALSE(reader->Read(&ev));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
}

v1::JobEvent step_event(long step) {
  v1::JobEvent e;
  e.set_state(v1::JOB_STATE_RUNNING);
  e.set_step(step);
  return e;
}

std::vector<long> replayed(const EventHistory& h, const std::string& id) {
  std::vector<long> out;
  h.replay(id, [&](const v1::JobEvent& e) { out.push_back(long(e.step())); });
  return out;
}

TEST(EventHistory, KeepsEachJobsLastEventsAndThoseOfTheLastJobsToEnd) {
  EventHistory h;
  for (long s = 1; s <= long(EventHistory::kPerJob) + 5; ++s) h.keep("a", step_event(s));
  const auto a = replayed(h, "a");
  ASSERT_EQ(a.size(), EventHistory::kPerJob);
  EXPECT_EQ(a.front(), 6);
  EXPECT_EQ(a.back(), long(EventHistory::kPerJob) + 5);
  EXPECT_TRUE(replayed(h, "never").empty());

  h.ended("a");  // kept until kEnded more jobs have ended
  for (size_t j = 0; j < EventHistory::kEnded; ++j) {
    const std::string id = "j" + std::to_string(j);
    h.keep(id, step_event(1));
    h.ended(id);
    EXPECT_EQ(replayed(h, "a").size(), j + 1 < EventHistory::kEnded ? EventHistory::kPerJob : 0u) << j;
  }
  EXPECT_EQ(h.jobs(), EventHistory::kEnded);
  h.ended("no-history");  // a job that never stepped leaves nothing behind
  EXPECT_EQ(h.jobs(), EventHistory::kEnded);
}

v1::JobEvent state_event(v1::JobState state, long step) {
  v1::JobEvent e;
  e.set_state(state);
  e.set_step(step);
  return e;
}

std::vector<v1::JobState> drain(WatchBacklog& b) {
  std::vector<v1::JobState> out;
  while (!b.empty()) out.push_back(b.pop().state());
  return out;
}

// A slow client's backlog drops steps of a run before any change of state, so the states it
// reads are, in order, those of every event; a backlog of changes only drops its oldest.
TEST(WatchBacklog, ASlowClientLosesStepsNeverAChangeOfState) {
  using S = v1::JobState;
  WatchBacklog b(4);
  const std::vector<S> sent = {v1::JOB_STATE_RUNNING, v1::JOB_STATE_RUNNING, v1::JOB_STATE_PAUSED,
                               v1::JOB_STATE_QUEUED,  v1::JOB_STATE_RUNNING, v1::JOB_STATE_RUNNING,
                               v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED};
  // At R4 the two first steps' older one goes; at R5 the backlog R P Q R is all changes and its
  // oldest goes; after that, steps again.
  for (size_t i = 0; i < sent.size(); ++i) {
    b.push(state_event(sent[i], long(i)));
    EXPECT_LE(b.size(), 4u);
  }
  EXPECT_EQ(drain(b), (std::vector<S>{v1::JOB_STATE_PAUSED, v1::JOB_STATE_QUEUED, v1::JOB_STATE_RUNNING,
                                      v1::JOB_STATE_SUCCEEDED}));
  for (int i = 0; i < 6; ++i) b.push(state_event(i % 2 ? v1::JOB_STATE_QUEUED : v1::JOB_STATE_PAUSED, i));
  EXPECT_EQ(b.size(), 4u);  // bounded all the same; the newest kept
  EXPECT_EQ(drain(b), (std::vector<S>{v1::JOB_STATE_PAUSED, v1::JOB_STATE_QUEUED, v1::JOB_STATE_PAUSED,
                                      v1::JOB_STATE_QUEUED}));
}

}  // namespace
}  // namespace mt::server::testing

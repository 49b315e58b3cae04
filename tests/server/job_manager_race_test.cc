// Calls that race a job's state changes, on the job manager itself (no gRPC in between, so the
// interleavings are forced rather than hoped for): a delete while a push to a yielded job is being
// spooled, a resume or pause after a cancel, a resume while pausing, and watchers that see every
// change once and in the order made (a watch begun on a pause's answer among them). Found by
// control-plane race hunts (2026-12-07).
#include <atomic>
#include <condition_variable>
#include <mutex>

#include "server/job_manager.h"
#include "tests/server/server_fixture.h"

namespace mt::server::testing {
namespace {

std::string submit(JobManager& jobs, const v1::JobSpec& spec) {
  auto r = jobs.submit(spec);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? r->job().id() : "";
}

template <class Pred>
v1::Job wait_for(JobManager& jobs, const std::string& id, Pred pred, double seconds = 60) {
  v1::Job j;
  for (int i = 0; i < int(seconds * 100); ++i) {
    auto g = jobs.get(id);
    if (g.ok() && pred(j = *g)) return j;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ADD_FAILURE() << "job " << id << " never got there; last state " << v1::JobState_Name(j.state());
  return j;
}

bool ended(const v1::Job& j) {
  return j.state() == v1::JOB_STATE_SUCCEEDED || j.state() == v1::JOB_STATE_FAILED ||
         j.state() == v1::JOB_STATE_CANCELLED;
}

// Holds each run before it starts until released: what is asked meanwhile is asked of a job that
// is RUNNING (the worker took it) and has not stepped.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void release() {
    std::lock_guard<std::mutex> l(mu);
    open = true;
    cv.notify_all();
  }
  Result<JobResult> run(JobRunner& r) {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return open; });
    l.unlock();
    return r.run();
  }
};

// A job manager started on the state directory `dir`, stopped (its worker joined) by stop() or at
// the end of the test. `gated`: each run waits for gate.release(); after_push: Options'
// after_push_spooled.
struct Manager {
  Gate gate;
  std::function<void(const std::string&)> after_push;
  Metrics metrics;
  JobManager jobs;
  bool stopped = false;

  explicit Manager(const std::string& dir, bool gated = false) : jobs(options(dir, gated), metrics) {
    const Status started = jobs.start();
    EXPECT_TRUE(started.ok()) << started.to_string();
  }
  ~Manager() { stop(); }
  void stop() {
    if (stopped) return;
    stopped = true;
    gate.release();  // a test that failed before releasing it still lets its worker end
    jobs.begin_stop();
    EXPECT_TRUE(jobs.shutdown(std::chrono::seconds(30)));
  }

 private:
  JobManager::Options options(const std::string& dir, bool gated) {
    JobManager::Options o;
    o.state_dir = dir;
    o.data_root = dir + "/data";
    o.budgets.host = 8ull << 30;
    std::filesystem::create_directories(o.data_root);
    if (gated) o.run_job = [this](JobRunner& r) { return gate.run(r); };
    o.after_push_spooled = [this](const std::string& id) {
      if (after_push) after_push(id);
    };
    return o;
  }
};

// A push job that starved and yielded the worker to a long job: {the push job, the long job}.
std::pair<std::string, std::string> yielded_push_job(JobManager& jobs) {
  const std::string starved = submit(jobs, tiny_spec(3, "push"));
  wait_for(jobs, starved, [](const v1::Job& j) { return j.waiting_for_data(); });
  const std::string other = submit(jobs, tiny_spec(100000));
  wait_for(jobs, starved, [](const v1::Job& j) { return j.state() == v1::JOB_STATE_QUEUED && j.queue_position() == -1; });
  return {starved, other};
}

// The deleted job's id went back into the queue (unpark_if_fed) and the worker dereferenced a
// null job when it popped it: the daemon died with SIGSEGV.
TEST(ServerRace, DeletingAYieldedPushJobWhileAPushIsSpooledLeavesTheWorkerRunning) {
  Manager m(fresh_dir("race_delete_push"));
  std::atomic<bool> armed{false};
  Status deleted = Status::Ok();
  m.after_push = [&](const std::string& id) {
    if (!armed.exchange(false)) return;
    auto r = m.jobs.remove(id, false);
    deleted = r.ok() ? Status::Ok() : r.status();
  };
  JobManager& jobs = m.jobs;
  const auto [starved, other] = yielded_push_job(jobs);

  armed = true;
  const std::vector<uint32_t> batch(4 * 33 * 2, 7);  // two full batches: enough to rejoin the queue
  auto pushed = jobs.push(starved, batch.data(), batch.size());
  EXPECT_TRUE(deleted.ok()) << deleted.to_string();
  ASSERT_FALSE(pushed.ok());
  EXPECT_EQ(pushed.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(pushed.status().message().find("deleted while this push was spooled"), std::string::npos)
      << pushed.status().to_string();

  ASSERT_TRUE(jobs.cancel(other).ok());  // the worker pops the next queued id
  const std::string after = submit(jobs, tiny_spec(2));
  EXPECT_EQ(wait_for(jobs, after, ended).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_FALSE(jobs.get(starved).ok());
}

// A yielded push job that a push feeds is back in the queue, no longer waiting for data, and its
// watchers hear of it (it said waiting_for_data, with no event, until the job ahead ended).
TEST(ServerRace, AFedYieldedJobStopsWaitingAndItsWatchersHearOfIt) {
  Manager m(fresh_dir("race_unpark"));
  JobManager& jobs = m.jobs;
  const auto [starved, other] = yielded_push_job(jobs);
  std::mutex mu;
  std::vector<v1::JobEvent> seen;
  auto token = jobs.watch(starved, [&](const v1::JobEvent& ev) {
    std::lock_guard<std::mutex> l(mu);
    seen.push_back(ev);
  });
  ASSERT_TRUE(token.ok());
  const std::vector<uint32_t> batch(4 * 33, 7);
  ASSERT_TRUE(jobs.push(starved, batch.data(), batch.size()).ok());
  const v1::Job fed = *jobs.get(starved);
  EXPECT_EQ(fed.state(), v1::JOB_STATE_QUEUED);
  EXPECT_FALSE(fed.waiting_for_data());
  EXPECT_GE(fed.queue_position(), 1);
  {
    std::lock_guard<std::mutex> l(mu);
    ASSERT_EQ(seen.size(), 2u);
    EXPECT_TRUE(seen[0].waiting_for_data());
    EXPECT_EQ(seen[1].state(), v1::JOB_STATE_QUEUED);
    EXPECT_FALSE(seen[1].waiting_for_data());
  }
  jobs.unwatch(*token);
  ASSERT_TRUE(jobs.cancel(other).ok());
}

// A submit answered with an error leaves no directory behind that a restart would load and run
// (here the record cannot be written: a directory squats job.json.tmp).
TEST(ServerRace, ASubmitThatFailsLeavesNoJobForARestart) {
  const std::string dir = fresh_dir("race_failed_submit");
  {
    Manager m(dir);
    std::filesystem::create_directories(dir + "/jobs/job-000001/job.json.tmp");
    auto r = m.jobs.submit(tiny_spec(3));
    ASSERT_FALSE(r.ok());
    EXPECT_FALSE(std::filesystem::exists(dir + "/jobs/job-000001"));
  }
  Manager again(dir);
  auto listed = again.jobs.list(v1::ListJobsRequest());
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->jobs_size(), 0);
}

// A cancel that was answered CANCELLED is what the job ends in: a resume or pause after it is
// refused, never answered QUEUED (or accepted) for a job that will not be queued (or pause) again.
TEST(ServerRace, AResumeOrPauseAfterAnAcknowledgedCancelIsRefused) {
  Manager m(fresh_dir("race_cancel_resume"), /*gated=*/true);
  JobManager& jobs = m.jobs;
  const std::string id = submit(jobs, tiny_spec(50));
  wait_for(jobs, id, [](const v1::Job& j) { return j.state() == v1::JOB_STATE_RUNNING; });

  std::atomic<int> paused_answers{0};
  Status pause_answer = Status::Ok();
  ASSERT_TRUE(jobs.pause(id, [&](const Status& st, const v1::Job&) {
                    pause_answer = st;
                    ++paused_answers;
                  }).ok());
  auto cancelled = jobs.cancel(id);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().to_string();
  EXPECT_EQ(cancelled->state(), v1::JOB_STATE_CANCELLED);
  auto resumed = jobs.resume(id);
  ASSERT_FALSE(resumed.ok()) << "answered " << v1::JobState_Name(resumed->state());
  EXPECT_EQ(resumed.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(resumed.status().message().find("being cancelled"), std::string::npos) << resumed.status().to_string();
  const Status again = jobs.pause(id, [](const Status&, const v1::Job&) { ADD_FAILURE() << "a refused pause was answered"; });
  EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition) << again.to_string();

  m.gate.release();
  EXPECT_EQ(wait_for(jobs, id, ended).state(), v1::JOB_STATE_CANCELLED);
  for (int i = 0; i < 500 && !paused_answers; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(paused_answers, 1);
  EXPECT_EQ(pause_answer.code(), StatusCode::kFailedPrecondition);  // the pause asked before the cancel
}

// A resume while pausing sends the job back to the queue; Job.preemptions counts only the runs
// stopped for a higher-priority job, and the job still ends bit for bit at its last step.
TEST(ServerRace, AResumeWhilePausingIsNoPreemption) {
  Manager m(fresh_dir("race_resume_pausing"), /*gated=*/true);
  JobManager& jobs = m.jobs;
  const std::string id = submit(jobs, tiny_spec(4));
  wait_for(jobs, id, [](const v1::Job& j) { return j.state() == v1::JOB_STATE_RUNNING; });
  std::atomic<int> answered{0};
  v1::JobState told = v1::JOB_STATE_UNSPECIFIED;
  ASSERT_TRUE(jobs.pause(id, [&](const Status& st, const v1::Job& j) {
                    EXPECT_TRUE(st.ok()) << st.to_string();
                    told = j.state();
                    ++answered;
                  }).ok());
  auto resumed = jobs.resume(id);
  ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
  EXPECT_EQ(resumed->state(), v1::JOB_STATE_QUEUED);
  m.gate.release();
  const v1::Job done = wait_for(jobs, id, ended);
  EXPECT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << done.reason();
  EXPECT_EQ(done.step(), 4);
  EXPECT_EQ(done.preemptions(), 0);
  EXPECT_EQ(answered, 1);
  EXPECT_EQ(told, v1::JOB_STATE_QUEUED);
}

// A job queued behind a running one, paused and resumed over and over while watches begin at
// every state a poll sees: each watch's states alternate PAUSED / QUEUED from its first event on
// (a change the first event already shows, delivered again, or two changes delivered crossed,
// would put two equal states side by side).
TEST(ServerRace, WatchesSeeEachPauseAndResumeOnceAndInOrder) {
  Manager m(fresh_dir("race_watch_order"));
  JobManager& jobs = m.jobs;
  const std::string running = submit(jobs, tiny_spec(1000000));
  wait_for(jobs, running, [](const v1::Job& j) { return j.step() >= 1; });
  v1::JobSpec queued_spec = tiny_spec(3);
  queued_spec.set_priority(-1);
  const std::string id = submit(jobs, queued_spec);

  std::mutex mu;
  std::vector<std::vector<v1::JobState>> seen;
  std::vector<uint64_t> tokens;
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    while (!done) {
      auto j = jobs.get(id);
      if (!j.ok()) break;
      size_t slot;
      {
        std::lock_guard<std::mutex> l(mu);
        slot = seen.size();
        seen.emplace_back();
      }
      auto t = jobs.watch(id, [&, slot](const v1::JobEvent& ev) {
        std::lock_guard<std::mutex> l(mu);
        seen[slot].push_back(ev.state());
      });
      if (!t.ok()) break;
      std::lock_guard<std::mutex> l(mu);
      tokens.push_back(*t);
      if (tokens.size() >= 400) break;
    }
  });
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(jobs.pause(id, [](const Status& st, const v1::Job&) { EXPECT_TRUE(st.ok()); }).ok());
    ASSERT_TRUE(jobs.resume(id).ok());
  }
  done = true;
  watcher.join();
  ASSERT_TRUE(jobs.cancel(running).ok());
  m.stop();
  for (uint64_t t : tokens) jobs.unwatch(t);
  std::lock_guard<std::mutex> l(mu);
  ASSERT_GT(seen.size(), 10u);
  for (size_t w = 0; w < seen.size(); ++w)
    for (size_t i = 1; i < seen[w].size(); ++i)
      if (seen[w][i] == seen[w][i - 1] && seen[w][i] != v1::JOB_STATE_RUNNING) {
        ADD_FAILURE() << "watch " << w << " saw " << v1::JobState_Name(seen[w][i]) << " twice in a row at event " << i;
        break;
      }
}

// The answer to a pause comes after the PAUSED event has gone out: a client that starts a watch
// on that answer (the Python client's test did) sees PAUSED once, from the watch's first event,
// and no second PAUSED after it. The watch begins inside the answer itself, so the order is checked
// deterministically rather than by a race.
TEST(ServerWatch, AWatchBegunOnAPausesAnswerSeesPausedOnce) {
  Manager m(fresh_dir("watch_pause_answer"));
  JobManager& jobs = m.jobs;
  const std::string id = submit(jobs, tiny_spec(100000));
  ASSERT_GE(wait_for(jobs, id, [](const v1::Job& j) { return j.step() >= 2; }, 30).step(), 2);

  std::mutex mu;
  std::vector<v1::JobState> seen;
  std::vector<uint64_t> tokens;
  std::atomic<bool> answered{false};
  ASSERT_TRUE(jobs.pause(id, [&](const Status& st, const v1::Job& j) {
                    EXPECT_TRUE(st.ok()) << st.to_string();
                    EXPECT_EQ(j.state(), v1::JOB_STATE_PAUSED);
                    auto t = jobs.watch(id, [&](const v1::JobEvent& ev) {
                      std::lock_guard<std::mutex> l(mu);
                      seen.push_back(ev.state());
                    });
                    EXPECT_TRUE(t.ok());
                    if (t.ok()) tokens.push_back(*t);
                    answered = true;
                  }).ok());
  for (int i = 0; i < 3000 && !answered; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(answered);
  m.stop();  // the worker, and what it delivers, has ended
  for (uint64_t t : tokens) jobs.unwatch(t);
  std::lock_guard<std::mutex> l(mu);
  EXPECT_EQ(seen, std::vector<v1::JobState>{v1::JOB_STATE_PAUSED});
}

}  // namespace
}  // namespace mt::server::testing

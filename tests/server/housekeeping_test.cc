// Issue 17: DeleteJob, retention, ListJobs paging and filters, megatrain_state_dir_bytes.
#include <chrono>
#include <functional>
#include <set>
#include <thread>

#include "server/job_housekeeping.h"
#include "tests/server/schedule_util.h"

namespace mt::server::testing {
namespace {

namespace fs = std::filesystem;

// Jobs that end at once (SUCCEEDED, one step) without training: paging and retention need many.
Result<JobResult> instant(JobRunner&) {
  JobResult r;
  r.steps_done = 1;
  return r;
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

grpc::Status list(v1::Trainer::Stub& stub, const v1::ListJobsRequest& req, v1::ListJobsResponse* resp) {
  auto c = ctx();
  return stub.ListJobs(c.get(), req, resp);
}

double state_dir_bytes(int metrics_port) {
  const std::string text = http_get(metrics_port, "/metrics");
  const std::string key = "\nmegatrain_state_dir_bytes ";
  const auto at = text.find(key);
  return at == std::string::npos ? -1 : std::strtod(text.c_str() + at + key.size(), nullptr);
}

TEST(ServerPaging, PagesCoverEveryJobOnceUnderConcurrentSubmissions) {
  HookedServer s(test_config(fresh_dir("paging")), instant);
  ASSERT_TRUE(s.stub);
  std::vector<std::string> before;
  for (int i = 0; i < 230; ++i) before.push_back(submit(*s.stub, named_spec(i)));
  std::atomic<bool> done{false};
  std::thread more([&] {
    for (int i = 0; i < 60; ++i) submit(*s.stub, named_spec(1000 + i));
    done = true;
  });
  std::vector<std::string> seen;
  v1::ListJobsRequest req;
  req.set_page_size(17);
  int pages = 0;
  do {
    v1::ListJobsResponse resp;
    ASSERT_TRUE(list(*s.stub, req, &resp).ok());
    EXPECT_LE(resp.jobs_size(), 17);
    for (const auto& j : resp.jobs()) seen.push_back(j.id());
    req.set_page_token(resp.next_page_token());
    ++pages;
  } while (!req.page_token().empty());
  more.join();
  EXPECT_GE(pages, 230 / 17);
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), seen.size()) << "a job was listed twice";
  for (size_t i = 1; i < seen.size(); ++i) EXPECT_TRUE(IdOrder()(seen[i - 1], seen[i])) << seen[i - 1] << " " << seen[i];
  for (const auto& id : before) EXPECT_NE(std::find(seen.begin(), seen.end(), id), seen.end()) << id << " missing";

  v1::ListJobsResponse all;
  v1::ListJobsRequest big;
  big.set_page_size(5000);  // coerced to 1000
  ASSERT_TRUE(list(*s.stub, big, &all).ok());
  EXPECT_EQ(all.jobs_size(), 290);
  EXPECT_TRUE(all.next_page_token().empty());
  v1::ListJobsResponse first;
  ASSERT_TRUE(list(*s.stub, v1::ListJobsRequest(), &first).ok());
  EXPECT_EQ(first.jobs_size(), 100);  // the default page
  EXPECT_FALSE(first.next_page_token().empty());
  v1::ListJobsRequest odd;
  odd.set_name("odd-");
  odd.set_page_size(1000);
  v1::ListJobsResponse odds;
  ASSERT_TRUE(list(*s.stub, odd, &odds).ok());
  EXPECT_EQ(odds.jobs_size(), 145);  // 115 of the first 230, 30 of the 60
  for (const auto& j : odds.jobs()) EXPECT_EQ(j.name().rfind("odd-", 0), 0u) << j.name();
  v1::ListJobsRequest bad;
  bad.set_page_size(-1);
  v1::ListJobsResponse ignored;
  EXPECT_EQ(list(*s.stub, bad, &ignored).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Malformed, and well-formed but naming no job this daemon issued (290 so far).
  for (const std::string& token : {std::string("garbage"), std::string("mtp1."), std::string("mtp1.zz"),
                                   std::string("mtp1.0a"), page_token_after("job-000291"), page_token_after("job-999999"),
                                   page_token_after("job-000000"), page_token_after("job-1"), page_token_after("x")}) {
    v1::ListJobsRequest t;
    t.set_page_token(token);
    EXPECT_EQ(list(*s.stub, t, &ignored).error_code(), grpc::StatusCode::INVALID_ARGUMENT) << token;
  }
  v1::ListJobsRequest last;  // the last job issued: a token this daemon could have written
  last.set_page_token(page_token_after("job-000290"));
  ASSERT_TRUE(list(*s.stub, last, &ignored).ok());
  EXPECT_EQ(ignored.jobs_size(), 0);
}

TEST(ServerDelete, DeleteAndKeepCheckpointsLeaveNoOrphanFiles) {
  const std::string dir = fresh_dir("delete");
  DaemonConfig cfg = test_config(dir);
  std::string a, p;
  {
    Server s(cfg);
    ASSERT_TRUE(s.stub);
    v1::JobSpec spec = tiny_spec(3);
    spec.mutable_checkpoint()->set_every(1);
    a = submit(*s.stub, spec);
    ASSERT_EQ(wait_terminal(*s.stub, a).state(), v1::JOB_STATE_SUCCEEDED);
    p = submit(*s.stub, tiny_spec(5, "push"));  // runs, waiting for data
    {
      v1::PushDataResponse resp;
      auto c = ctx();
      auto w = s.stub->PushData(c.get(), &resp);
      v1::PushDataRequest chunk;
      chunk.set_job_id(p);
      for (int i = 0; i < 100; ++i) chunk.add_tokens(uint32_t(i));
      ASSERT_TRUE(w->Write(chunk));
      w->WritesDone();
      ASSERT_TRUE(w->Finish().ok());
    }
    wait_job(*s.stub, p, [](const v1::Job& j) { return j.waiting_for_data(); });
    v1::DeleteJobResponse resp;
    const grpc::Status running = delete_job(*s.stub, p, false, &resp);
    EXPECT_EQ(running.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(running.error_message().find("running"), std::string::npos) << running.error_message();
    v1::CancelJobRequest cancel;
    cancel.set_job_id(p);
    v1::Job cancelled;
    auto cc = ctx();
    ASSERT_TRUE(s.stub->CancelJob(cc.get(), cancel, &cancelled).ok());
    ASSERT_EQ(wait_terminal(*s.stub, p).state(), v1::JOB_STATE_CANCELLED);

    const double full = state_dir_bytes(s.daemon->metrics_port());
    EXPECT_GT(full, 0);
    ASSERT_TRUE(delete_job(*s.stub, p, false, &resp).ok());
    EXPECT_GE(resp.freed_bytes(), 100u * 4);  // at least the spooled tokens
    EXPECT_TRUE(resp.kept_checkpoints().empty());
    EXPECT_LT(state_dir_bytes(s.daemon->metrics_port()), full);

    ASSERT_TRUE(delete_job(*s.stub, a, true, &resp).ok());
    EXPECT_EQ(resp.kept_checkpoints(), cfg.data_root + "/checkpoints/" + a);
    EXPECT_TRUE(fs::exists(resp.kept_checkpoints() + "/latest"));
    EXPECT_TRUE(fs::exists(resp.kept_checkpoints() + "/step-00000003/model.safetensors"));
    v1::Job gone;
    EXPECT_EQ(get_job(*s.stub, a, &gone).error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(delete_job(*s.stub, a, false, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(entries(dir + "/jobs"), std::vector<std::string>{}) << "orphans under jobs/";
    v1::ListJobsResponse none;
    ASSERT_TRUE(list(*s.stub, v1::ListJobsRequest(), &none).ok());
    EXPECT_EQ(none.jobs_size(), 0);
  }
  // A restarted daemon never issues a deleted job's id again.
  Server s(cfg);
  ASSERT_TRUE(s.stub);
  const std::string next = submit(*s.stub, tiny_spec(1));
  EXPECT_TRUE(IdOrder()(p, next)) << next << " after " << p;
}

// A queued job's deletion cancels it first: its watchers see CANCELLED; the running job (held
// behind a gate) is refused.
TEST(ServerDelete, DeletingAQueuedJobEndsItForItsWatchers) {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  const std::string dir = fresh_dir("delete_queued");
  HookedServer s(test_config(dir), [&](JobRunner& r) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return open; });
    return instant(r);
  });
  ASSERT_TRUE(s.stub);
  // The gate opens however the test ends: a failed assertion must not leave the daemon's
  // destructor waiting forever on the held job (a CI run once hung here for 600 s).
  auto release = [&] {
    {
      std::lock_guard<std::mutex> lock(mu);
      open = true;
    }
    cv.notify_all();
  };
  struct Opener {
    std::function<void()> f;
    ~Opener() { f(); }
  } opener{release};
  const std::string a = submit(*s.stub, tiny_spec(1));
  wait_job(*s.stub, a, [](const v1::Job& j) { return j.state() == v1::JOB_STATE_RUNNING; });
  const std::string q = submit(*s.stub, tiny_spec(1));
  v1::DeleteJobResponse resp;
  EXPECT_EQ(delete_job(*s.stub, a, false, &resp).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  {
    Watcher w(*s.stub, q);
    // Delete only once the watch is registered (its first event seen): deleted before that, the
    // watch finds no job and ends empty, which is right but not what this test is about.
    ASSERT_TRUE(w.wait_first()) << "the watch of the queued job saw nothing";
    ASSERT_TRUE(delete_job(*s.stub, q, false, &resp).ok());
    const auto ev = w.join();
    ASSERT_FALSE(ev.empty());
    EXPECT_EQ(ev.back().state(), v1::JOB_STATE_CANCELLED);
    EXPECT_EQ(ev.back().reason(), "deleted by request");
  }
  EXPECT_EQ(entries(dir + "/jobs"), std::vector<std::string>{a});
  release();
  EXPECT_EQ(wait_terminal(*s.stub, a).state(), v1::JOB_STATE_SUCCEEDED);
}

TEST(ServerRetention, KeepsTheNewestFinishedJobsAndNoneOlderThanTheDays) {
  const std::string dir = fresh_dir("retention");
  DaemonConfig cfg = test_config(dir);
  cfg.retain_jobs = 2;
  std::vector<std::string> ids;
  {
    HookedServer s(cfg, instant);
    ASSERT_TRUE(s.stub);
    for (int i = 0; i < 5; ++i) {
      ids.push_back(submit(*s.stub, named_spec(i)));
      wait_job(*s.stub, ids.back(), [](const v1::Job& j) { return terminal(j.state()); });
    }
    // The sweep runs after a job's end is recorded, on the daemon's own thread: the last job can
    // be seen terminal a moment before the sweep has retired the oldest (seen under load).
    v1::ListJobsResponse resp;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    do {
      ASSERT_TRUE(list(*s.stub, v1::ListJobsRequest(), &resp).ok());
      if (resp.jobs_size() == 2) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } while (std::chrono::steady_clock::now() < deadline);
    ASSERT_EQ(resp.jobs_size(), 2);
    EXPECT_EQ(resp.jobs(0).id(), ids[3]);
    EXPECT_EQ(resp.jobs(1).id(), ids[4]);
    // The sweep after the last job's end renames, then removes (outside the daemon's lock).
    const std::vector<std::string> kept{ids[3], ids[4]};
    for (int i = 0; i < 100 && entries(dir + "/jobs") != kept; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(entries(dir + "/jobs"), kept);
  }
  // One of the two finished three days ago: --retain_days 1 deletes it at startup.
  const std::string record = dir + "/jobs/" + ids[3] + "/job.json";
  auto text = read_file(record);
  ASSERT_TRUE(text.ok());
  auto j = Json::parse(*text);
  ASSERT_TRUE(j.ok());
  j->set("finished_ms", now_ms() - int64_t(3 * 86400e3));
  ASSERT_TRUE(save_record(record, *record_from_json(*j)).ok());
  // A deletion a crash cut short (renamed, not yet removed) is finished at the next start.
  fs::create_directories(dir + "/jobs/.deleting-job-000099");
  std::ofstream(dir + "/jobs/.deleting-job-000099/job.json") << "{\"id\": \"job-000099\", \"state\": \"succeeded\"}";
  cfg.retain_jobs = 0;
  cfg.retain_days = 1;
  HookedServer s(cfg, instant);
  ASSERT_TRUE(s.stub);
  EXPECT_EQ(entries(dir + "/jobs"), std::vector<std::string>{ids[4]});
  v1::Job old;
  EXPECT_EQ(get_job(*s.stub, ids[3], &old).error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace mt::server::testing

namespace mt::server::testing {
namespace {

// A job cancelled just as the scheduler takes it (after it is RUNNING in its record, before its
// runner exists) was marked "cancelled while queued" and announced CANCELLED while it still ran:
// a client that then deleted it was told the job is running. Now the cancel waits for the run to
// stop, so a job a watcher sees CANCELLED is deleted at once. Each round submits and cancels at
// once, so the cancel lands in the queue, in that window or in the run.
TEST(ServerDelete, AJobSeenCancelledIsDeletedAtOnce) {
  Server s(test_config(fresh_dir("cancel_then_delete")));
  ASSERT_TRUE(s.stub);
  for (int round = 0; round < 8; ++round) {
    const std::string id = submit(*s.stub, tiny_spec(100000));
    ASSERT_FALSE(id.empty());
    cancel_job(*s.stub, id);
    const v1::Job j = wait_terminal(*s.stub, id);
    EXPECT_EQ(j.state(), v1::JOB_STATE_CANCELLED) << j.reason();
    v1::DeleteJobResponse resp;
    const grpc::Status st = delete_job(*s.stub, id, false, &resp);
    EXPECT_TRUE(st.ok()) << "round " << round << ": " << st.error_message() << " (" << j.reason() << ")";
  }
}

}  // namespace
}  // namespace mt::server::testing

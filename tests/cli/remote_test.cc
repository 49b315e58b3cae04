// Every remote command against a spawned megatraind, in human and --json modes, with exit codes.
#include "tests/cli/cli_fixture.h"

namespace mt::cli::testing {
namespace {

const Json* member(const Json& j, const char* key) {
  const Json* v = j.find(key);
  EXPECT_NE(v, nullptr) << "no '" << key << "' in " << j.dump();
  static const Json kNull;
  return v ? v : &kNull;
}

class RemoteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    daemon_ = std::make_unique<DaemonProcess>(std::string("d_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(daemon_->ok());
  }
  void TearDown() override {
    if (HasFailure() && daemon_) std::cerr << "--- megatraind log ---\n" << daemon_->log();
    daemon_.reset();
    if (!HasFailure()) fs::remove_all(dir_);
  }
  std::string spec(long steps, const std::string& data = "{source: synthetic, seed: 1}") {
    return write_file(dir_ + "/spec" + std::to_string(n_++) + ".yaml", tiny_spec_yaml(steps, data));
  }
  std::string submit(const std::string& spec_path) {
    RunResult r = daemon_->cli({"submit", spec_path});
    EXPECT_EQ(r.rc, 0) << describe(r);
    std::string id = r.out;
    while (!id.empty() && id.back() == '\n') id.pop_back();
    EXPECT_FALSE(id.empty());
    EXPECT_EQ(id.find('\n'), std::string::npos) << "submit prints only the job id: " << r.out;
    return id;
  }
  // Polls `status ID --json` until the job has done a step (or 60 s pass).
  Json wait_running(const std::string& id) {
    Json job;
    for (int i = 0; i < 600; ++i) {
      RunResult r = daemon_->cli({"status", id, "--json"});
      auto lines = r.json_lines();
      if (r.rc == 0 && lines.size() == 1) job = lines[0];
      if (job.find("step") && job.find("step")->as_int() >= 1) return job;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "job " << id << " did not start: " << job.dump();
    return job;
  }

  std::string dir_;
  std::unique_ptr<DaemonProcess> daemon_;
  int n_ = 0;
};

TEST_F(RemoteTest, SubmitThenWatchHuman) {
  // Long enough that the watch (a process started after the submit returns) sees it run: a job
  // of 4 steps could end first, and a watch of a finished job prints only the summary.
  const std::string id = submit(spec(40));
  RunResult w = daemon_->cli({"watch", id});
  ASSERT_EQ(w.rc, 0) << describe(w);
  // stdout is not a terminal: one plain progress line per step, then the summary.
  EXPECT_NE(w.out.find("step 40/40  loss "), std::string::npos) << w.out;
  EXPECT_NE(w.out.find("tok/s"), std::string::npos);
  EXPECT_NE(w.out.find("final_loss:"), std::string::npos);
  EXPECT_NE(w.out.find("succeeded"), std::string::npos);
  EXPECT_EQ(w.out.find("\r"), std::string::npos) << "no live line when stdout is not a terminal";
}

TEST_F(RemoteTest, SubmitWatchJson) {
  RunResult r = daemon_->cli({"submit", spec(4), "--watch", "--json"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  auto lines = r.json_lines();
  ASSERT_GE(lines.size(), 3u) << r.out;
  EXPECT_EQ(member(lines.front(), "event")->as_string(), "submitted");
  EXPECT_FALSE(member(lines.front(), "id")->as_string().empty());
  EXPECT_TRUE(member(*member(lines.front(), "plan"), "fits")->as_bool());
  long last_step = 0;
  std::vector<double> lr;
  for (size_t i = 1; i + 1 < lines.size(); ++i) {
    EXPECT_EQ(member(lines[i], "event")->as_string(), "step");
    const long step = long(member(lines[i], "step")->as_int());
    EXPECT_GT(step, last_step);
    last_step = step;
    EXPECT_GT(member(lines[i], "loss")->as_double(), 0);
    EXPECT_GT(member(lines[i], "tokens_per_second")->as_double(), 0);
    EXPECT_GT(member(lines[i], "step_seconds")->as_double(), 0);
    // The step's update (cli_fixture.h: grad_clip 1.0, lr 3e-3, 2 warmup steps, cosine).
    const double norm = member(lines[i], "grad_norm")->as_double();
    EXPECT_GT(norm, 0);
    EXPECT_EQ(member(lines[i], "grad_clipped")->as_bool(), norm > 1.0) << lines[i].dump();
    lr.push_back(member(lines[i], "learning_rate")->as_double());
    EXPECT_EQ(lines[i].find("aux_loss"), nullptr) << "a dense model has no load-balancing loss: " << lines[i].dump();
  }
  EXPECT_EQ(last_step, 4);
  ASSERT_EQ(lr.size(), 4u);
  EXPECT_LT(lr[0], lr[1]) << "warmup";
  EXPECT_NEAR(lr[1], 3e-3, 1e-9) << "the peak at the end of warmup";
  EXPECT_LT(lr[3], lr[1]) << "cosine decay";
  const Json& sum = lines.back();
  EXPECT_EQ(member(sum, "event")->as_string(), "summary");
  EXPECT_EQ(member(sum, "steps")->as_int(), 4);
  EXPECT_EQ(member(sum, "state")->as_string(), "succeeded");
  EXPECT_GT(member(sum, "final_loss")->as_double(), 0);
  EXPECT_GT(member(sum, "tokens_per_second")->as_double(), 0);
  EXPECT_TRUE(fs::exists(member(sum, "checkpoint")->as_string())) << sum.dump();
}

// A job with a held-out set: `watch` prints each evaluation as it arrives (a plain line, an
// `eval` object with --json), `status` the latest and best held-out loss, `checkpoints` each
// checkpoint's held-out loss and which is the best.
TEST_F(RemoteTest, HeldOutEvaluationInWatchStatusAndCheckpoints) {
  std::string text = tiny_spec_yaml(6);
  text.replace(text.find("checkpoint: {every: 0, keep: 2}"), 31, "checkpoint: {every: 3, keep: 2}");
  text += "eval: {data: {source: synthetic, seed: 5}, every: 3, max_tokens: 256}\n";
  const std::string path = write_file(dir_ + "/eval.yaml", text);
  RunResult r = daemon_->cli({"submit", path, "--watch", "--json"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  std::vector<long> eval_steps;
  std::string id;
  for (const Json& j : r.json_lines()) {
    if (member(j, "event")->as_string() == "submitted") id = member(j, "id")->as_string();
    if (member(j, "event")->as_string() != "eval") continue;
    eval_steps.push_back(long(member(j, "step")->as_int()));
    EXPECT_GT(member(j, "eval_loss")->as_double(), 0);
    EXPECT_LE(member(j, "best_eval_loss")->as_double(), member(j, "eval_loss")->as_double());
  }
  EXPECT_EQ(eval_steps, (std::vector<long>{3, 6})) << r.out;
  const Json sum = r.json_lines().back();  // a copy: json_lines() returns a temporary
  EXPECT_GT(member(sum, "eval_loss")->as_double(), 0) << sum.dump();
  RunResult w = daemon_->cli({"watch", id});
  ASSERT_EQ(w.rc, 0) << describe(w);
  // The job is over: a plain watch prints its summary; --from-start its steps and evaluations too.
  RunResult again = daemon_->cli({"watch", id, "--from-start", "--json"});
  ASSERT_EQ(again.rc, 0) << describe(again);
  std::vector<long> again_steps, again_evals;
  for (const Json& j : again.json_lines()) {
    const std::string event = member(j, "event")->as_string();
    if (event == "step") again_steps.push_back(long(member(j, "step")->as_int()));
    if (event == "eval") again_evals.push_back(long(member(j, "step")->as_int()));
  }
  EXPECT_EQ(again_steps, (std::vector<long>{1, 2, 3, 4, 5, 6})) << again.out;
  EXPECT_EQ(again_evals, (std::vector<long>{3, 6})) << again.out;
  // The summary's keys and meaning are `megatrain train`'s: tokens_per_second is the run's mean
  // (equal tokens a step: the harmonic mean of the steps' rates), not the last step's; eval_step.
  double inverse = 0;
  for (const Json& j : again.json_lines())
    if (member(j, "event")->as_string() == "step") inverse += 1 / member(j, "tokens_per_second")->as_double();
  const Json again_sum = again.json_lines().back();
  EXPECT_EQ(member(again_sum, "eval_step")->as_int(), 6) << again_sum.dump();
  EXPECT_NEAR(member(again_sum, "tokens_per_second")->as_double(), 6 / inverse, 1e-6 * 6 / inverse) << again_sum.dump();
  RunResult plain = daemon_->cli({"watch", id, "--json"});
  ASSERT_EQ(plain.rc, 0) << describe(plain);
  EXPECT_EQ(plain.json_lines().size(), 1u) << plain.out;  // the summary alone
  RunResult status = daemon_->cli({"status", id});
  ASSERT_EQ(status.rc, 0) << describe(status);
  EXPECT_NE(status.out.find("held-out     loss "), std::string::npos) << status.out;
  EXPECT_NE(status.out.find(" at step 6 (best "), std::string::npos) << status.out;
  RunResult sj = daemon_->cli({"status", id, "--json"});
  ASSERT_EQ(sj.rc, 0) << describe(sj);
  EXPECT_EQ(member(sj.json_lines()[0], "eval_step")->as_int(), 6);
  RunResult ck = daemon_->cli({"checkpoints", id});
  ASSERT_EQ(ck.rc, 0) << describe(ck);
  EXPECT_NE(ck.out.find("HELD-OUT"), std::string::npos) << ck.out;
  EXPECT_NE(ck.out.find("(best held-out)"), std::string::npos) << ck.out;
}

TEST_F(RemoteTest, ListAndStatus) {
  RunResult empty = daemon_->cli({"list"});
  EXPECT_EQ(empty.rc, 0) << describe(empty);
  EXPECT_NE(empty.out.find("no jobs"), std::string::npos);
  const std::string id = submit(spec(2));
  ASSERT_EQ(daemon_->cli({"watch", id}).rc, 0);

  RunResult list = daemon_->cli({"list"});
  EXPECT_EQ(list.rc, 0) << describe(list);
  EXPECT_NE(list.out.find("STATE"), std::string::npos);
  EXPECT_NE(list.out.find(id), std::string::npos);
  EXPECT_NE(list.out.find("succeeded"), std::string::npos);
  RunResult listj = daemon_->cli({"list", "--json"});
  ASSERT_EQ(listj.rc, 0) << describe(listj);
  auto jobs = listj.json_lines();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(member(jobs[0], "id")->as_string(), id);
  EXPECT_EQ(daemon_->cli({"list", "--state", "running", "--json"}).out, "");
  EXPECT_EQ(daemon_->cli({"list", "--state", "sleeping"}).rc, 2);
  // A name with accents and CJK is padded by the columns it takes, not its bytes: "résumé-日本"
  // is 9 characters, 11 columns (each CJK character takes two), so 9 spaces pad it to 20.
  std::string named = tiny_spec_yaml(1);
  named.replace(0, named.find('\n'), "name: r\xc3\xa9sum\xc3\xa9-\xe6\x97\xa5\xe6\x9c\xac");
  const std::string other = submit(write_file(dir_ + "/named.yaml", named));
  ASSERT_EQ(daemon_->cli({"watch", other}).rc, 0);
  RunResult aligned = daemon_->cli({"list"});
  EXPECT_NE(aligned.out.find("r\xc3\xa9sum\xc3\xa9-\xe6\x97\xa5\xe6\x9c\xac" + std::string(10, ' ') + "succeeded"),
            std::string::npos) << aligned.out;

  RunResult status = daemon_->cli({"status", id});
  EXPECT_EQ(status.rc, 0) << describe(status);
  EXPECT_NE(status.out.find("succeeded"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("step         2/2"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("update       grad norm "), std::string::npos) << "the last step's update: " << status.out;
  RunResult sj = daemon_->cli({"status", id, "--json"});
  ASSERT_EQ(sj.rc, 0) << describe(sj);
  auto s = sj.json_lines();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(member(s[0], "state")->as_string(), "succeeded");
  EXPECT_EQ(member(s[0], "step")->as_int(), 2);
  EXPECT_GT(member(s[0], "grad_norm")->as_double(), 0);
  EXPECT_GT(member(s[0], "learning_rate")->as_double(), 0);
  EXPECT_EQ(member(*member(s[0], "spec"), "seq_len")->as_int(), 32);

  RunResult missing = daemon_->cli({"status", "no-such-job"});
  EXPECT_EQ(missing.rc, 2) << describe(missing);
  EXPECT_NE(missing.err.find("no-such-job"), std::string::npos) << missing.err;
  EXPECT_EQ(daemon_->cli({"status"}).rc, 2);
  EXPECT_EQ(daemon_->cli({"watch", "no-such-job", "--json"}).rc, 2);
}

TEST_F(RemoteTest, CheckpointThenCancel) {
  const std::string id = submit(spec(100000));
  wait_running(id);
  RunResult ck = daemon_->cli({"checkpoint", id});
  ASSERT_EQ(ck.rc, 0) << describe(ck);
  EXPECT_NE(ck.out.find("checkpoint at step"), std::string::npos) << ck.out;
  RunResult ckj = daemon_->cli({"checkpoint", id, "--json"});
  ASSERT_EQ(ckj.rc, 0) << describe(ckj);
  auto c = ckj.json_lines();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(member(c[0], "id")->as_string(), id);
  EXPECT_GE(member(c[0], "step")->as_int(), 1);
  EXPECT_TRUE(fs::exists(member(c[0], "checkpoint")->as_string())) << c[0].dump();

  RunResult cancel = daemon_->cli({"cancel", id});
  ASSERT_EQ(cancel.rc, 0) << describe(cancel);
  EXPECT_NE(cancel.out.find("job " + id), std::string::npos) << cancel.out;
  RunResult w = daemon_->cli({"watch", id, "--json"});
  EXPECT_EQ(w.rc, 1) << "a cancelled job exits 1: " << describe(w);
  auto lines = w.json_lines();
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(member(lines.back(), "event")->as_string(), "summary");
  EXPECT_EQ(member(lines.back(), "state")->as_string(), "cancelled");
  EXPECT_TRUE(member(lines.back(), "cancelled")->as_bool());

  // A job that no longer runs cannot checkpoint: a refused request, exit 2.
  RunResult late = daemon_->cli({"checkpoint", id});
  EXPECT_EQ(late.rc, 2) << describe(late);
  RunResult cj = daemon_->cli({"cancel", "no-such-job", "--json"});
  EXPECT_EQ(cj.rc, 2) << describe(cj);
}

TEST_F(RemoteTest, CancelJsonWhileWatching) {
  const std::string id = submit(spec(100000));
  wait_running(id);
  RunResult cancel = daemon_->cli({"cancel", id, "--json"});
  ASSERT_EQ(cancel.rc, 0) << describe(cancel);
  auto c = cancel.json_lines();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(member(c[0], "id")->as_string(), id);
  RunResult w = daemon_->cli({"watch", id});
  EXPECT_EQ(w.rc, 1) << describe(w);
  EXPECT_NE(w.out.find("cancelled"), std::string::npos) << w.out;
}

TEST_F(RemoteTest, FailedJobExitsOne) {
  // Ten bytes of text cannot fill one 33-token window: the job fails when it runs.
  write_file(daemon_->data_root() + "/short.txt", "0123456789");
  RunResult r = daemon_->cli({"submit", spec(3, "{source: text, path: short.txt}"), "--watch", "--json"});
  EXPECT_EQ(r.rc, 1) << describe(r);
  auto lines = r.json_lines();
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(member(lines.back(), "state")->as_string(), "failed");
  EXPECT_NE(member(lines.back(), "reason")->as_string().find("seq_len"), std::string::npos) << lines.back().dump();
}

TEST_F(RemoteTest, PlanAsksTheServer) {
  const std::string path = spec(10);
  RunResult human = daemon_->cli({"plan", path});
  ASSERT_EQ(human.rc, 0) << describe(human);
  EXPECT_NE(human.out.find("host memory"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("server budget  host 8.00 GiB"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("fits           yes"), std::string::npos) << human.out;
  RunResult remote = daemon_->cli({"plan", path, "--json"});
  ASSERT_EQ(remote.rc, 0) << describe(remote);
  RunResult local = megatrain({"plan", path, "--json"});
  ASSERT_EQ(local.rc, 0) << describe(local);
  auto r = remote.json_lines(), l = local.json_lines();
  ASSERT_EQ(r.size(), 1u);
  ASSERT_EQ(l.size(), 1u);
  for (const char* key : {"params", "host_bytes", "host_bytes_per_param", "device_bytes", "fits"})
    EXPECT_EQ(member(r[0], key)->dump(), member(l[0], key)->dump()) << key;
  EXPECT_EQ(member(r[0], "host_budget_bytes")->as_int(), int64_t(8) << 30);
  // MEGATRAIN_SERVER selects the remote planner too.
  RunResult env = megatrain({"plan", path, "--json"}, {{"MEGATRAIN_SERVER", daemon_->address()}});
  ASSERT_EQ(env.rc, 0) << describe(env);
  EXPECT_NE(env.out.find("host_budget_bytes"), std::string::npos);
}

TEST_F(RemoteTest, ServerFromEnvironment) {
  RunResult r = megatrain({"list", "--json"}, {{"MEGATRAIN_SERVER", daemon_->address()}});
  EXPECT_EQ(r.rc, 0) << describe(r);
  EXPECT_EQ(r.out, "");
}

}  // namespace
}  // namespace mt::cli::testing

namespace mt::cli::testing {
namespace {

// Issue 17 through the CLI: --priority on submit, the queue in `list` (PRI, POS) and in every
// --json output, pause/resume by hand, and delete (refused while running, then no files left).
TEST_F(RemoteTest, PriorityPauseResumeAndDelete) {
  const std::string low = submit(spec(100000));
  wait_running(low);
  RunResult sub = daemon_->cli({"submit", spec(100000), "--priority", "7", "--json"});
  ASSERT_EQ(sub.rc, 0) << describe(sub);
  const Json submitted = sub.json_lines().at(0);
  const std::string high = member(submitted, "id")->as_string();
  EXPECT_EQ(member(submitted, "priority")->as_int(), 7);
  EXPECT_EQ(daemon_->cli({"submit", spec(1), "--priority", "high"}).rc, 2);
  // The high job preempts the low one, which goes back to the queue as next to run.
  Json lj;
  for (int i = 0; i < 600; ++i) {
    RunResult r = daemon_->cli({"status", low, "--json"});
    if (r.rc == 0 && !r.json_lines().empty()) lj = r.json_lines()[0];
    if (lj.find("preemptions") && lj.find("preemptions")->as_int() == 1 && lj.find("state")->as_string() == "queued") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(member(lj, "queue_position")->as_int(), 1) << lj.dump();
  EXPECT_EQ(member(lj, "priority")->as_int(), 0);
  RunResult list = daemon_->cli({"list"});
  EXPECT_NE(list.out.find("PRI"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("POS"), std::string::npos) << list.out;
  RunResult human = daemon_->cli({"status", low});
  EXPECT_NE(human.out.find("priority     0 (next in the queue), preempted 1x"), std::string::npos) << human.out;

  RunResult pause = daemon_->cli({"pause", low, "--json"});
  ASSERT_EQ(pause.rc, 0) << describe(pause);
  EXPECT_EQ(member(pause.json_lines().at(0), "state")->as_string(), "paused");
  EXPECT_EQ(member(pause.json_lines().at(0), "queue_position")->as_int(), -1);
  RunResult paused = daemon_->cli({"list", "--state", "paused", "--json"});
  ASSERT_EQ(paused.json_lines().size(), 1u) << paused.out;
  EXPECT_EQ(member(paused.json_lines()[0], "id")->as_string(), low);
  EXPECT_EQ(daemon_->cli({"pause", low}).rc, 2);
  RunResult resume = daemon_->cli({"resume", low});
  ASSERT_EQ(resume.rc, 0) << describe(resume);
  EXPECT_NE(resume.out.find("queued"), std::string::npos) << resume.out;

  RunResult refused = daemon_->cli({"delete", high});
  EXPECT_EQ(refused.rc, 2) << describe(refused);
  EXPECT_NE(refused.err.find("running"), std::string::npos) << refused.err;
  for (const std::string& id : {high, low}) ASSERT_EQ(daemon_->cli({"cancel", id}).rc, 0);
  daemon_->cli({"watch", high});
  daemon_->cli({"watch", low});
  RunResult del = daemon_->cli({"delete", high, "--json"});
  ASSERT_EQ(del.rc, 0) << describe(del);
  EXPECT_TRUE(member(del.json_lines().at(0), "deleted")->as_bool());
  EXPECT_GT(member(del.json_lines().at(0), "freed_bytes")->as_int(), 0);
  ASSERT_EQ(daemon_->cli({"delete", low, "--keep-checkpoints"}).rc, 0);
  EXPECT_NE(daemon_->cli({"list"}).out.find("no jobs"), std::string::npos);
  EXPECT_EQ(daemon_->cli({"status", high}).rc, 2);
}

}  // namespace
}  // namespace mt::cli::testing

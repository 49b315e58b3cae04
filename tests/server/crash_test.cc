// kill -9 the daemon (a real megatraind process) during a push job, restart it: the job resumes
// from its checkpoint and no acknowledged token is lost or repeated.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "engine/base/json.h"
#include "engine/io/checkpoint.h"
#include "engine/io/tensorboard.h"
#include "engine/job/job.h"
#include "server/spec_convert.h"
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

// kill -9 the daemon mid-run of a job with logging.tensorboard: the restarted job resumes from its
// last checkpoint, the steps the killed run logged after it (and any torn record) are replaced,
// and the event file ends with every step exactly once.
TEST(ServerCrash, KillNineLeavesTensorBoardCurvesWithEachStepOnce) {
  if (!std::filesystem::exists(megatraind_path())) GTEST_SKIP() << "megatraind not built";
  const std::string state = fresh_dir("crash_tensorboard");
  v1::JobSpec spec = tiny_spec(300);
  spec.mutable_checkpoint()->set_every(7);
  spec.mutable_logging()->set_tensorboard(true);
  std::string id;
  long killed_at = 0, announced = 0;
  {
    Process p(state);
    ASSERT_GT(p.port, 0);
    id = submit(*p.stub, spec);
    const v1::Job j =
        wait_job(*p.stub, id, [](const v1::Job& x) { return x.step() >= 30 && !x.last_checkpoint().empty(); });
    killed_at = j.step();
    p.kill9();
    // A checkpoint is written beside the steps that follow it and announced once durable: the
    // resume is from the last one announced before the kill or a later one, not from killed_at's.
    announced = parse_step_dir(std::filesystem::path(j.last_checkpoint()).filename().string());
    ASSERT_GE(announced, 0) << "no checkpoint announced by step " << killed_at << ": " << j.last_checkpoint();
  }
  const double restarted = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  Process p(state);
  ASSERT_GT(p.port, 0);
  const v1::Job j = wait_terminal(*p.stub, id, 120);
  ASSERT_EQ(j.state(), v1::JOB_STATE_SUCCEEDED) << j.reason();
  auto f = read_tensorboard_file(j.tensorboard_dir() + "/" + kTensorBoardFile);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  ASSERT_EQ(f->events.size(), 301u) << "the version record and steps 1..300 once (killed near step " << killed_at << ")";
  for (long step = 1; step <= 300; ++step) ASSERT_EQ(f->events[size_t(step)].step, step);
  EXPECT_EQ(f->ends.back(), f->size);
  // It resumed: the records up to a checkpoint (a multiple of 7, at or past the last one announced
  // before the kill) are the killed run's, kept; every later one was logged after the restart.
  long first_new = 1;
  while (first_new <= 300 && f->events[size_t(first_new)].wall_time < restarted) ++first_new;
  EXPECT_EQ((first_new - 1) % 7, 0) << "resumed after step " << first_new - 1 << ", not a checkpoint";
  EXPECT_GE(first_new - 1, announced) << "the killed run's steps up to its checkpoint are kept (killed near step "
                                       << killed_at << ")";
  for (long step = first_new; step <= 300; ++step) ASSERT_GE(f->events[size_t(step)].wall_time, restarted) << step;
}

// Held-out evaluations across a kill -9: the resumed job evaluates at the same steps with the
// same numbers as the same spec run uninterrupted (in this process, by the engine alone), and
// TensorBoard's eval/loss holds each of those steps once.
TEST(ServerCrash, KillNineThenResumeEvaluatesAtTheSameStepsWithTheSameNumbers) {
  if (!std::filesystem::exists(megatraind_path())) GTEST_SKIP() << "megatraind not built";
  const std::string state = fresh_dir("crash_eval");
  v1::JobSpec spec = tiny_spec(120);
  spec.mutable_checkpoint()->set_every(7);
  spec.mutable_logging()->set_tensorboard(true);
  v1::EvalSpec* e = spec.mutable_eval();
  e->mutable_data()->set_source("synthetic");
  e->mutable_data()->set_seed(11);
  e->set_every(10);
  e->set_max_tokens(256);
  auto engine_spec = spec_from_proto(spec, {state});
  ASSERT_TRUE(engine_spec.ok()) << engine_spec.status().to_string();
  std::map<long, double> want;
  JobHooks hooks;
  hooks.on_eval = [&](const EvalReport& r) { want[r.step] = r.loss; };
  JobRunner whole(*engine_spec, fresh_dir("crash_eval_whole"), hooks);
  ASSERT_TRUE(whole.run().ok());
  ASSERT_EQ(want.size(), 12u);
  std::string id;
  {
    Process p(state);
    ASSERT_GT(p.port, 0);
    id = submit(*p.stub, spec);
    (void)wait_job(*p.stub, id, [](const v1::Job& x) { return x.eval_step() >= 20 && x.step() >= 24; });
    p.kill9();
  }
  Process p(state);
  ASSERT_GT(p.port, 0);
  const v1::Job j = wait_terminal(*p.stub, id, 120);
  ASSERT_EQ(j.state(), v1::JOB_STATE_SUCCEEDED) << j.reason();
  EXPECT_EQ(j.eval_step(), 120);
  EXPECT_EQ(j.eval_loss(), want.at(120));
  std::ifstream log(state + "/jobs/" + id + "/log.txt");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("resuming at step"), std::string::npos) << "the kill must interrupt the job";
  auto f = read_tensorboard_file(j.tensorboard_dir() + "/" + kTensorBoardFile);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  std::map<long, int> seen;
  for (const TensorBoardEvent& ev : f->events)
    for (const auto& [tag, v] : ev.scalars)
      if (tag == "eval/loss") {
        ++seen[ev.step];
        EXPECT_EQ(v, double(float(want.at(ev.step)))) << "step " << ev.step;
      }
  ASSERT_EQ(seen.size(), want.size());
  for (const auto& [step, n] : seen) EXPECT_EQ(n, 1) << "eval/loss at step " << step;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Issue 11 (4): one flipped byte in the middle of a push job's spool used to truncate the spool
// there, silently. Now the restarted daemon fails the job naming the record and its offset, and
// leaves the file (and every acknowledged token in it) as it was.
TEST(ServerCrash, CorruptSpoolRecordFailsTheJobAndKeepsTheFile) {
  if (!std::filesystem::exists(megatraind_path())) GTEST_SKIP() << "megatraind not built";
  const std::string state = fresh_dir("corrupt_spool");
  std::mt19937 rng(7);
  uint64_t sum = 0;
  std::string id;
  {
    Process p(state);
    ASSERT_GT(p.port, 0);
    id = submit(*p.stub, tiny_spec(100, "push"));
    ASSERT_EQ(push(*p.stub, id, 150, rng, sum), 150u);  // three records of 50 tokens
    wait_job(*p.stub, id, [](const v1::Job& x) { return x.waiting_for_data(); });
    p.kill9();
  }
  const std::string spool = state + "/jobs/" + id + "/push.spool";
  const uint64_t record = 32 + 50 * 4;
  ASSERT_EQ(std::filesystem::file_size(spool), 3 * record);
  {
    std::fstream f(spool, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(record + 32 + 17));  // inside record 1's payload
    f.put('\x7f');
  }
  const std::string damaged = file_bytes(spool);
  Process p(state);
  ASSERT_GT(p.port, 0);
  const v1::Job j = wait_terminal(*p.stub, id);
  EXPECT_EQ(j.state(), v1::JOB_STATE_FAILED);
  EXPECT_NE(j.reason().find("DATA_LOSS"), std::string::npos) << j.reason();
  EXPECT_NE(j.reason().find("record 1 (byte " + std::to_string(record) + " "), std::string::npos) << j.reason();
  EXPECT_EQ(file_bytes(spool), damaged) << "the spool was modified";
  // The job's own log ends with the failure (it had ended with "resumes on restart").
  const std::string log = file_bytes(state + "/jobs/" + id + "/log.txt");
  EXPECT_NE(log.find("job failed: cannot resume after restart: DATA_LOSS"), std::string::npos) << log;
}

// A daemon under a file size limit (LimitFSIZE=, ulimit -f) whose job writes a checkpoint past it:
// the checkpoint fails naming the file and the daemon serves on. Before, SIGXFSZ ended the daemon
// and every job it ran.
TEST(ServerCrash, ACheckpointPastTheFileSizeLimitFailsTheJobNotTheDaemon) {
  const std::string state = fresh_dir("file_size_limit");
  Process p(state, 2 << 20);  // the tiny model's checkpoint is ~10 MB; records and logs are far less
  ASSERT_GT(p.port, 0);
  const std::string id = submit(*p.stub, tiny_spec(3));
  const v1::Job j = wait_terminal(*p.stub, id);
  EXPECT_EQ(j.state(), v1::JOB_STATE_FAILED) << j.reason();
  EXPECT_NE(j.reason().find("File too large"), std::string::npos) << j.reason();
  int status = 0;
  EXPECT_EQ(::waitpid(p.pid, &status, WNOHANG), 0) << "the daemon ended: " << status;
  v1::GetJobRequest get;
  get.set_job_id(id);
  v1::Job again;
  auto c = ctx();
  EXPECT_TRUE(p.stub->GetJob(c.get(), get, &again).ok()) << "the daemon stopped serving";
}

// A daemon started without OMP_WAIT_POLICY re-executes itself with it and keeps its name
// (/proc/self/exe named it "exe": `pkill megatraind` matched nothing); a second daemon on the same
// --listen exits 1 naming it (gRPC's default SO_REUSEPORT let it start and take connections).
TEST(ServerProcess, KeepsItsNameAndASecondDaemonOnItsPortExits) {
  ::unsetenv("OMP_WAIT_POLICY");  // the child re-executes itself, as when started by hand
  ::unsetenv("MEGATRAIN_OMP_WAIT_POLICY");
  const std::string a = fresh_dir("process_name"), b = fresh_dir("process_port");
  Process first(a);
  ASSERT_GT(first.port, 0);
  auto comm = read_file("/proc/" + std::to_string(first.pid) + "/comm");
  ASSERT_TRUE(comm.ok());
  EXPECT_EQ(*comm, "megatraind\n");

  const std::string err_path = b + "/second.err";
  const pid_t second = ::fork();
  if (second == 0) {
    ::dup2(::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), STDERR_FILENO);
    const std::string state = "--state_dir=" + b, listen = "--listen=127.0.0.1:" + std::to_string(first.port);
    ::execl(megatraind_path().c_str(), "megatraind", state.c_str(), listen.c_str(), "--metrics_listen=",
            "--host_memory=8G", "--log_level=warning", nullptr);
    ::_exit(127);
  }
  int status = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (::waitpid(second, &status, WNOHANG) == 0 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (::kill(second, 0) == 0) {  // still serving: the failure this test is about
    ::kill(second, SIGKILL);
    ::waitpid(second, &status, 0);
    FAIL() << "a second daemon started on port " << first.port;
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
  auto err = read_file(err_path);
  EXPECT_NE(err.ok() ? err->find("cannot listen") : std::string::npos, std::string::npos) << (err.ok() ? *err : "");
}
}  // namespace
}  // namespace mt::server::testing

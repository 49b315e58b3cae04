// megatrain logs, checkpoints and export --remote as a user runs them: separate processes
// against a spawned megatraind. A follower started as the job is submitted prints every step
// line once and in order and exits 0 when the job ends.
#include "tests/cli/cli_fixture.h"

namespace mt::cli::testing {
namespace {

std::vector<long> steps_in(const std::vector<Json>& lines) {
  std::vector<long> out;
  for (const auto& l : lines) {
    long k = 0, n = 0;
    if (std::sscanf(l.find("text")->as_string().c_str(), "step %ld/%ld ", &k, &n) == 2) out.push_back(k);
  }
  return out;
}

TEST(CliLogs, FollowFromAnotherProcessCheckpointsAndRemoteExport) {
  const std::string dir = fresh_dir("cli_logs");
  DaemonProcess d("d_cli_logs");
  ASSERT_TRUE(d.ok());
  std::string yaml = tiny_spec_yaml(24);
  yaml.replace(yaml.find("checkpoint: {every: 0, keep: 2}"), 31, "checkpoint: {every: 8, keep: 5}");
  const std::string spec = write_file(dir + "/spec.yaml", yaml);
  RunResult sub = d.cli({"submit", spec});
  ASSERT_EQ(sub.rc, 0) << describe(sub);
  std::string id = sub.out.substr(0, sub.out.find('\n'));

  RunResult follow = d.cli({"logs", id, "-f", "--json"});
  ASSERT_EQ(follow.rc, 0) << describe(follow);
  const auto lines = follow.json_lines();
  ASSERT_FALSE(lines.empty());
  std::vector<long> want;
  for (long k = 1; k <= 24; ++k) want.push_back(k);
  EXPECT_EQ(steps_in(lines), want);
  EXPECT_EQ(lines.back().find("text")->as_string(), "job succeeded: finished");
  RunResult status = d.cli({"status", id, "--json"});
  EXPECT_NE(status.out.find("\"succeeded\""), std::string::npos) << "logs -f returned before the job ended";

  RunResult tail = d.cli({"logs", id, "--tail", "2"});
  ASSERT_EQ(tail.rc, 0) << describe(tail);
  EXPECT_EQ(std::count(tail.out.begin(), tail.out.end(), '\n'), 2);
  EXPECT_NE(tail.out.find(" info job succeeded: finished\n"), std::string::npos) << tail.out;
  RunResult since = d.cli({"logs", id, "--since", "1h", "--json"});
  EXPECT_EQ(since.json_lines().size(), lines.size());
  RunResult future = d.cli({"logs", id, "--since", "2999-01-01T00:00:00Z"});
  EXPECT_EQ(future.rc, 0);
  EXPECT_EQ(future.out, "");
  EXPECT_EQ(d.cli({"logs", "job-999999"}).rc, 2);
  EXPECT_EQ(d.cli({"logs", id, "--since", "yesterday"}).rc, 2);
  EXPECT_EQ(d.cli({"logs", id, "--tail", "-4"}).rc, 2);
  RunResult daemon_log = d.cli({"logs", "daemon"});
  EXPECT_EQ(daemon_log.rc, 0);

  RunResult ck = d.cli({"checkpoints", id, "--json"});
  ASSERT_EQ(ck.rc, 0) << describe(ck);
  const auto cks = ck.json_lines();
  ASSERT_EQ(cks.size(), 3u);
  for (size_t i = 0; i < cks.size(); ++i) {
    EXPECT_EQ(cks[i].find("step")->as_int(), int64_t(8 * (i + 1)));
    uint64_t bytes = 0;
    for (const auto& f : fs::directory_iterator(cks[i].find("path")->as_string())) bytes += f.file_size();
    EXPECT_EQ(uint64_t(cks[i].find("size_bytes")->as_int()), bytes);
  }

  RunResult ex = d.cli({"export", "--remote", id, "models/tiny", "--dtype", "fp32", "--step", "16", "--json"});
  ASSERT_EQ(ex.rc, 0) << describe(ex);
  EXPECT_TRUE(fs::exists(d.data_root() + "/models/tiny/config.json"));
  ASSERT_EQ(ex.json_lines().size(), 1u) << describe(ex);
  EXPECT_EQ(ex.json_lines()[0].find("event")->as_string(), "exported");  // every --json line names its kind
  RunResult inspect = megatrain({"inspect", d.data_root() + "/models/tiny", "--json"});
  EXPECT_EQ(inspect.rc, 0) << describe(inspect);
  EXPECT_NE(inspect.out.find("F32"), std::string::npos) << inspect.out;
  const auto described = inspect.json_lines();
  ASSERT_GE(described.size(), 2u) << describe(inspect);
  for (size_t i = 0; i < described.size(); ++i) {
    const Json* event = described[i].find("event");
    ASSERT_NE(event, nullptr) << described[i].dump();
    EXPECT_EQ(event->as_string(), i + 1 < described.size() ? "tensor" : "summary") << described[i].dump();
  }
  RunResult escape = d.cli({"export", "--remote", id, "../../etc/x"});
  EXPECT_EQ(escape.rc, 2);
  EXPECT_NE(escape.err.find("'..'"), std::string::npos) << escape.err;
}

// Issue 24.3 and 24.6: `logs ID -f` of a queued job exits 0 once the job is deleted; --since
// further back than 1970 means from the beginning; with --json a failed command prints one error
// object on stdout.
TEST(CliLogs, AFollowerEndsWhenItsQueuedJobIsDeletedAndSinceBefore1970IsTheBeginning) {
  const std::string dir = fresh_dir("cli_logs_delete");
  DaemonProcess d("d_cli_logs_delete");
  ASSERT_TRUE(d.ok());
  RunResult busy = d.cli({"submit", write_file(dir + "/busy.yaml", tiny_spec_yaml(100000))});
  ASSERT_EQ(busy.rc, 0) << describe(busy);
  RunResult queued = d.cli({"submit", write_file(dir + "/queued.yaml", tiny_spec_yaml(4))});
  ASSERT_EQ(queued.rc, 0) << describe(queued);
  const std::string id = queued.out.substr(0, queued.out.find('\n'));

  RunResult all = d.cli({"logs", id, "--since", "36500d", "--json"});
  EXPECT_EQ(all.rc, 0) << describe(all);
  EXPECT_EQ(all.json_lines().size(), d.cli({"logs", id, "--json"}).json_lines().size());

  RunResult follow;
  std::thread follower([&] { follow = d.cli({"logs", id, "-f"}, 30); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  RunResult del = d.cli({"delete", id});
  ASSERT_EQ(del.rc, 0) << describe(del);
  follower.join();
  EXPECT_EQ(follow.rc, 0) << "logs -f did not end with the deleted job: " << describe(follow);

  RunResult gone = d.cli({"logs", id, "--json"});
  EXPECT_EQ(gone.rc, 2) << describe(gone);
  const auto err = gone.json_lines();
  ASSERT_EQ(err.size(), 1u) << describe(gone);
  EXPECT_EQ(err[0].find("event")->as_string(), "error");
  EXPECT_EQ(err[0].find("code")->as_string(), "NOT_FOUND");
  EXPECT_EQ(err[0].find("exit_code")->as_int(), 2);
  EXPECT_NE(err[0].find("message")->as_string().find(id), std::string::npos) << gone.out;
  RunResult usage = megatrain({"train", "/nonexistent.yaml", "--json"});
  ASSERT_EQ(usage.json_lines().size(), 1u) << describe(usage);
  EXPECT_EQ(usage.json_lines()[0].find("event")->as_string(), "error");
  d.cli({"cancel", busy.out.substr(0, busy.out.find('\n'))});
}

}  // namespace
}  // namespace mt::cli::testing

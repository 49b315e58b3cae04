// push ID FILE --format tokens-u16|tokens-u32|text against a `data: {source: push}` job: chunks
// and tokens accepted, the job trains on them, and bad files or tokens are refused (exit 2).
#include "tests/cli/cli_fixture.h"
#include "tests/test_paths.h"

namespace mt::cli::testing {
namespace {

std::string tokens_file(const std::string& path, size_t n, int bytes, uint32_t modulo) {
  std::string raw;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t t = uint32_t((i * 7 + i / 3) % modulo);
    for (int b = 0; b < bytes; ++b) raw.push_back(char((t >> (8 * b)) & 0xff));
  }
  return write_file(path, raw);
}

class PushTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<DaemonProcess>("push_daemon");
    ASSERT_TRUE(daemon_->ok());
    dir_ = fresh_dir("push_files");
    RunResult r = daemon_->cli({"submit", write_file(dir_ + "/spec.yaml", tiny_spec_yaml(10, "{source: push}"))});
    ASSERT_EQ(r.rc, 0) << describe(r);
    id_ = r.out.substr(0, r.out.find('\n'));
  }
  void TearDown() override {
    if (HasFailure() && daemon_) std::cerr << "--- megatraind log ---\n" << daemon_->log();
    daemon_.reset();
    if (!HasFailure()) fs::remove_all(dir_);
  }
  std::unique_ptr<DaemonProcess> daemon_;
  std::string dir_, id_;
};

TEST_F(PushTest, FormatsAreAcceptedAndTheJobTrains) {
  // 10 steps x 4 sequences x 33 tokens = 1320 = 1003 + 300 + 17: the job cannot finish before the
  // last push arrives, so no push races the job's end.
  RunResult u16 = daemon_->cli({"push", id_, tokens_file(dir_ + "/a.u16", 1003, 2, 256), "--format", "tokens-u16",
                                "--chunk-tokens", "100"});
  ASSERT_EQ(u16.rc, 0) << describe(u16);
  EXPECT_NE(u16.out.find("accepted 1003 tokens in 11 chunks (1003 tokens spooled in all)"), std::string::npos)
      << u16.out;
  EXPECT_NE(u16.err.find("1003/1003 tokens"), std::string::npos) << "progress on stderr: " << u16.err;

  RunResult u32 = daemon_->cli({"push", id_, tokens_file(dir_ + "/b.u32", 300, 4, 256), "--format", "tokens-u32",
                                "--json"});
  ASSERT_EQ(u32.rc, 0) << describe(u32);
  auto j = u32.json_lines();
  ASSERT_EQ(j.size(), 1u) << u32.out;
  EXPECT_EQ(j[0].find("tokens_accepted")->as_int(), 300);
  EXPECT_EQ(j[0].find("chunks_accepted")->as_int(), 1);
  EXPECT_EQ(j[0].find("spooled_tokens")->as_int(), 1303);

  RunResult text = daemon_->cli({"push", id_, write_file(dir_ + "/c.txt", "hello, megatrain\n"), "--format", "text",
                                 "--json"});
  ASSERT_EQ(text.rc, 0) << describe(text);
  j = text.json_lines();
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0].find("tokens_accepted")->as_int(), 17);

  RunResult w = daemon_->cli({"watch", id_, "--json"});
  EXPECT_EQ(w.rc, 0) << describe(w);
  auto lines = w.json_lines();
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back().find("steps")->as_int(), 10);
  RunResult st = daemon_->cli({"status", id_});
  EXPECT_NE(st.out.find("1320 tokens spooled"), std::string::npos) << st.out;
}

// The same file under another --format is another push (its own default id), never the rest of
// the first: a tokens-u32 push resumed as u16 had appended the file's second half as other ids.
TEST_F(PushTest, AnotherFormatIsAnotherPushNotTheRestOfTheFirst) {
  const std::string file = tokens_file(dir_ + "/b.u32", 300, 4, 256);
  RunResult u32 = daemon_->cli({"push", id_, file, "--format", "tokens-u32", "--json"});
  ASSERT_EQ(u32.rc, 0) << describe(u32);
  RunResult u16 = daemon_->cli({"push", id_, file, "--format", "tokens-u16", "--json"});
  ASSERT_EQ(u16.rc, 0) << describe(u16);
  const Json a = u32.json_lines().at(0), b = u16.json_lines().at(0);
  EXPECT_NE(a.find("push_id")->as_string(), b.find("push_id")->as_string());
  EXPECT_EQ(b.find("resumed_at")->as_int(), 0) << u16.out;
  EXPECT_EQ(b.find("tokens_accepted")->as_int(), 600) << u16.out;
  EXPECT_EQ(b.find("spooled_tokens")->as_int(), 900) << u16.out;
  // A tokens-u16 push's id is what every format's was before: another format finding it holding
  // tokens is refused, naming it (a tokens-u32 push begun by an earlier client resumes with
  // --push-id ID instead of being spooled again from its start).
  const std::string other = tokens_file(dir_ + "/c.u16", 64, 2, 256);
  ASSERT_EQ(daemon_->cli({"push", id_, other, "--format", "tokens-u16"}).rc, 0);
  RunResult as_text = daemon_->cli({"push", id_, other, "--format", "text"});
  EXPECT_EQ(as_text.rc, 2) << describe(as_text);
  EXPECT_NE(as_text.err.find("(an earlier client's id for this file) holds 64 tokens"), std::string::npos)
      << describe(as_text);
  EXPECT_EQ(daemon_->cli({"cancel", id_}).rc, 0);
}

TEST_F(PushTest, BadInputIsRefused) {
  // Token 300 is outside the tiny model's 256-token vocabulary: refused naming it, nothing kept.
  RunResult big = daemon_->cli({"push", id_, tokens_file(dir_ + "/big.u16", 400, 2, 400), "--format", "tokens-u16"});
  EXPECT_EQ(big.rc, 2) << describe(big);
  EXPECT_NE(big.err.find("chunk 0"), std::string::npos) << big.err;
  // Issue 11 (12): progress never claims 100% before the daemon's answer, and the error says how
  // much of the push the daemon holds and how to resume.
  EXPECT_EQ(big.err.find("100%"), std::string::npos) << big.err;
  EXPECT_NE(big.err.find("0 of its 400 tokens are spooled; the file's tokens are refused as they are: correct them "
                         "and add --push-id"),
            std::string::npos)
      << big.err;
  RunResult odd = daemon_->cli({"push", id_, write_file(dir_ + "/odd.u16", "abc"), "--format", "tokens-u16"});
  EXPECT_EQ(odd.rc, 2) << describe(odd);
  EXPECT_NE(odd.err.find("3 bytes"), std::string::npos) << odd.err;
  RunResult nojob = daemon_->cli(
      {"push", "no-such-job", tokens_file(dir_ + "/ok.u16", 10, 2, 256), "--format", "tokens-u16", "--json"});
  EXPECT_EQ(nojob.rc, 2) << describe(nojob);
  ASSERT_EQ(nojob.json_lines().size(), 1u) << describe(nojob);  // issue 24.11: one error object
  EXPECT_EQ(nojob.json_lines()[0].find("event")->as_string(), "error");
  EXPECT_EQ(nojob.json_lines()[0].find("code")->as_string(), "NOT_FOUND");
  RunResult big_json = daemon_->cli({"push", id_, dir_ + "/big.u16", "--format", "tokens-u16", "--json"});
  EXPECT_EQ(big_json.rc, 2) << describe(big_json);
  ASSERT_EQ(big_json.json_lines().size(), 1u) << describe(big_json);
  const Json e = big_json.json_lines()[0];
  EXPECT_EQ(e.find("event")->as_string(), "error");
  EXPECT_EQ(e.find("code")->as_string(), "INVALID_ARGUMENT");
  EXPECT_EQ(e.find("push_committed_tokens")->as_int(), 0) << big_json.out;
  EXPECT_EQ(e.find("total_tokens")->as_int(), 400) << big_json.out;
  EXPECT_NE(e.find("message")->as_string().find("chunk 0"), std::string::npos) << big_json.out;
  RunResult fmt = daemon_->cli({"push", id_, dir_ + "/ok.u16", "--format", "tokens-u8"});
  EXPECT_EQ(fmt.rc, 2) << describe(fmt);
  EXPECT_NE(fmt.err.find("tokens-u8"), std::string::npos) << fmt.err;
  // No default format: a retry that left --format out would read the file as other tokens.
  RunResult none = daemon_->cli({"push", id_, dir_ + "/ok.u16"});
  EXPECT_EQ(none.rc, 2) << describe(none);
  EXPECT_NE(none.err.find("push needs --format"), std::string::npos) << none.err;
  RunResult st = daemon_->cli({"status", id_, "--json"});
  ASSERT_EQ(st.rc, 0);
  EXPECT_EQ(st.json_lines().at(0).find("data_spooled_tokens")->as_int(), 0);
  EXPECT_EQ(daemon_->cli({"cancel", id_}).rc, 0);
}

// The daemon's token checksum (splitmix64 finaliser), written out here as the test's oracle.
uint64_t oracle_checksum(const std::string& raw_u16) {
  uint64_t sum = 0;
  for (size_t i = 0; i + 1 < raw_u16.size(); i += 2) {
    uint64_t z = uint64_t(uint8_t(raw_u16[i]) | uint8_t(raw_u16[i + 1]) << 8) + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    sum += z ^ (z >> 31);
  }
  return sum;
}

// Issue 11 (12): `megatrain push` killed with kill -9 part-way, then run again as it was: the job
// gets every token of the file exactly once (the push resumes where the daemon's spool stopped),
// and trains on exactly the file's tokens. Also (13): status --json reports the consumed checksum.
TEST(PushRetry, KilledPushRunAgainSpoolsEachTokenOnce) {
  DaemonProcess daemon("push_kill9");
  ASSERT_TRUE(daemon.ok());
  const std::string dir = fresh_dir("push_kill9_files");
  RunResult sub = daemon.cli({"submit", write_file(dir + "/spec.yaml", tiny_spec_yaml(40, "{source: push}"))});
  ASSERT_EQ(sub.rc, 0) << describe(sub);
  const std::string id = sub.out.substr(0, sub.out.find('\n'));
  const size_t total = 40 * 4 * 33;
  const std::string file = tokens_file(dir + "/data.u16", total, 2, 256);
  const std::vector<std::string> cmd = {mt::testing_util::megatrain_cli(),    "push",     id,       file,
                                        "--format",       "tokens-u16", "--chunk-tokens", "4",
                                        "--server",       daemon.address()};
  const std::string spool = daemon.state_dir() + "/jobs/" + id + "/push.spool";
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, STDOUT_FILENO);
    ::dup2(null, STDERR_FILENO);
    std::vector<char*> args;
    for (const auto& a : cmd) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  // Kill it once the daemon has spooled ten chunks (each is fsynced: the whole push takes a while).
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::error_code ec;
  while (std::chrono::steady_clock::now() < end && fs::file_size(spool, ec) < 10 * (32 + 16)) std::this_thread::yield();
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  const uint64_t at_kill = fs::file_size(spool, ec);
  EXPECT_LT(at_kill, total / 4 * (32 + 16)) << "the push finished before the kill";

  RunResult again = daemon.cli({"push", id, file, "--format", "tokens-u16", "--chunk-tokens", "500", "--json"});
  ASSERT_EQ(again.rc, 0) << describe(again);
  const Json r = again.json_lines().at(0);
  ASSERT_NE(r.find("resumed_at"), nullptr) << again.out;
  EXPECT_GT(r.find("resumed_at")->as_int(), 0) << again.out;
  EXPECT_EQ(r.find("resumed_at")->as_int() + r.find("tokens_accepted")->as_int(), int64_t(total)) << again.out;
  EXPECT_EQ(r.find("spooled_tokens")->as_int(), int64_t(total)) << again.out;

  RunResult third = daemon.cli({"push", id, file, "--format", "tokens-u16"});  // done already: nothing new
  EXPECT_EQ(third.rc, 0) << describe(third);
  EXPECT_NE(third.err.find("is complete"), std::string::npos) << third.err;
  // What it says of the job's spool is the daemon's count, not a zero for the tokens not re-sent.
  EXPECT_NE(third.out.find("accepted 0 tokens in 0 chunks (" + std::to_string(total) + " tokens spooled in all)"),
            std::string::npos)
      << third.out;

  RunResult w = daemon.cli({"watch", id, "--json"});
  EXPECT_EQ(w.rc, 0) << describe(w);
  RunResult st = daemon.cli({"status", id, "--json"});
  ASSERT_EQ(st.rc, 0) << describe(st);
  const Json j = st.json_lines().at(0);
  EXPECT_EQ(j.find("state")->as_string(), "succeeded");
  EXPECT_EQ(j.find("data_spooled_tokens")->as_int(), int64_t(total));
  EXPECT_EQ(j.find("data_consumed_tokens")->as_int(), int64_t(total));
  ASSERT_NE(j.find("data_consumed_checksum"), nullptr) << st.out;
  auto raw = read_file(file);
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(j.find("data_consumed_checksum")->as_string(), std::to_string(oracle_checksum(*raw)));
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

}  // namespace
}  // namespace mt::cli::testing

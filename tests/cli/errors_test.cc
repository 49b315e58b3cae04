// Bad input and bad connections: a misspelt spec key is refused naming the key (exit 2), an
// unreachable or unauthenticated server exits 3, usage errors exit 2.
#include "tests/cli/cli_fixture.h"

namespace mt::cli::testing {
namespace {

std::string misspelt_spec(const std::string& dir, const std::string& name, const std::string& from,
                          const std::string& to) {
  std::string text = tiny_spec_yaml(3);
  text.replace(text.find(from), from.size(), to);
  return write_file(dir + "/" + name + ".yaml", text);
}

TEST(CliErrors, HelpListsCommandsAndExitCodes) {
  RunResult r = megatrain({"--help"});
  EXPECT_EQ(r.rc, 0) << describe(r);
  for (const char* s : {"submit SPEC", "watch ID", "push ID FILE", "checkpoint ID", "exit codes", "3 server unreachable"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
  EXPECT_EQ(megatrain({}).rc, 2);
  EXPECT_EQ(megatrain({"frobnicate"}).rc, 2);
}

TEST(CliErrors, MisspeltKeyIsRefusedNamingIt) {
  DaemonProcess d("misspelt");
  ASSERT_TRUE(d.ok());
  const std::string dir = fresh_dir("misspelt_specs");
  const std::string top = misspelt_spec(dir, "top", "seq_len:", "seq_lenn:");
  const std::string nested = misspelt_spec(dir, "nested", "weight_decay:", "wieght_decay:");
  for (const char* cmd : {"submit", "plan"}) {
    RunResult r = d.cli({cmd, top});
    EXPECT_EQ(r.rc, 2) << describe(r);
    EXPECT_NE(r.err.find("seq_lenn"), std::string::npos) << r.err;
    r = d.cli({cmd, nested, "--json"});
    EXPECT_EQ(r.rc, 2) << describe(r);
    EXPECT_NE(r.err.find("wieght_decay"), std::string::npos) << r.err;
  }
  RunResult local = megatrain({"train", top});
  EXPECT_EQ(local.rc, 2) << describe(local);
  EXPECT_NE(local.err.find("seq_lenn"), std::string::npos) << local.err;
  // A bad value is named too (by the daemon or by the JSON mapping).
  std::string bad = tiny_spec_yaml(3);
  bad.replace(bad.find("seq_len: 32"), 11, "seq_len: many");
  RunResult v = d.cli({"submit", write_file(dir + "/value.yaml", bad)});
  EXPECT_EQ(v.rc, 2) << describe(v);
  EXPECT_NE(v.err.find("seq_len"), std::string::npos) << v.err;
  RunResult none = d.cli({"submit", dir + "/no-such-spec.yaml"});
  EXPECT_EQ(none.rc, 2) << describe(none);
  RunResult list = d.cli({"list", "--json"});
  EXPECT_EQ(list.out, "") << "nothing was submitted";
  fs::remove_all(dir);
}

TEST(CliErrors, UnreachableServerExitsThree) {
  const std::string dir = fresh_dir("unreachable");
  const std::string spec = write_file(dir + "/spec.yaml", tiny_spec_yaml(3));
  const std::string tokens = write_file(dir + "/tokens.bin", std::string(64, '\1'));
  const std::string addr = "127.0.0.1:" + std::to_string(unused_port());
  const std::vector<std::vector<std::string>> commands = {
      {"submit", spec}, {"list"}, {"status", "1"}, {"watch", "1"}, {"cancel", "1"}, {"checkpoint", "1"},
      {"push", "1", tokens, "--format", "tokens-u16"}, {"plan", spec}};
  for (const bool json : {false, true}) {
    for (auto args : commands) {
      args.insert(args.end(), {"--server", addr});
      if (json) args.push_back("--json");
      RunResult r = megatrain(args, {}, 60);
      EXPECT_EQ(r.rc, 3) << args[0] << ": " << describe(r);
      EXPECT_NE(r.err.find("cannot reach megatraind at " + addr), std::string::npos) << args[0] << ": " << r.err;
      EXPECT_EQ(r.out, "") << args[0];
    }
  }
  RunResult env = megatrain({"list"}, {{"MEGATRAIN_SERVER", addr}}, 60);
  EXPECT_EQ(env.rc, 3) << describe(env);
  fs::remove_all(dir);
}

TEST(CliErrors, BearerToken) {
  const std::string dir = fresh_dir("token");
  const std::string token = write_file(dir + "/token", "0123456789abcdef0123456789abcdef\n");
  const std::string wrong = write_file(dir + "/wrong", "fedcba9876543210fedcba9876543210\n");
  DaemonProcess d("token_daemon", {"--auth_token_file=" + token});
  ASSERT_TRUE(d.ok());
  RunResult none = d.cli({"list"});
  EXPECT_EQ(none.rc, 3) << describe(none);
  EXPECT_NE(none.err.find("authorization"), std::string::npos) << none.err;
  RunResult bad = d.cli({"list", "--token-file", wrong});
  EXPECT_EQ(bad.rc, 3) << describe(bad);
  RunResult good = d.cli({"list", "--token-file", token});
  EXPECT_EQ(good.rc, 0) << describe(good);
  RunResult env = megatrain({"list", "--json"}, {{"MEGATRAIN_SERVER", d.address()}, {"MEGATRAIN_TOKEN_FILE", token}});
  EXPECT_EQ(env.rc, 0) << describe(env);
  RunResult missing = d.cli({"list", "--token-file", dir + "/absent"});
  EXPECT_EQ(missing.rc, 2) << describe(missing);
  // TLS with a CA file that is not there is a usage error, before any connection.
  RunResult ca = d.cli({"list", "--tls-ca", dir + "/absent-ca.pem"});
  EXPECT_EQ(ca.rc, 2) << describe(ca);
  fs::remove_all(dir);
}

TEST(CliErrors, UsageErrorsExitTwo) {
  const std::string addr = "127.0.0.1:" + std::to_string(unused_port());
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"status"}, {"watch"}, {"cancel", "a", "b"}, {"checkpoint"}, {"push", "1"},
        {"submit"}, {"push", "1", "/nonexistent/file", "--format", "tokens-u16"},
        {"push", "1", "/dev/null", "--format", "bf16"}}) {
    auto full = args;
    full.insert(full.end(), {"--server", addr});
    RunResult r = megatrain(full, {}, 60);
    EXPECT_EQ(r.rc, 2) << args[0] << ": " << describe(r);
  }
}

}  // namespace
}  // namespace mt::cli::testing

// Bad input and bad connections: a misspelt spec key is refused naming the key (exit 2), an
// unreachable or unauthenticated server exits 3, usage errors exit 2; the bad-input table of
// issue 11 (non-finite numbers, unbounded inputs, destructive export, bad addresses, --help),
// each row a separate process with its exit code and error, the daemon serving after every row.
#include <limits>

#include "engine/exec/executor.h"
#include "engine/io/hf_io.h"
#include "tests/cli/cli_fixture.h"
#include "tests/test_paths.h"

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
      if (!json) {
        EXPECT_EQ(r.out, "") << args[0];
        continue;
      }
      const auto lines = r.json_lines();  // issue 24.11: one error object, the gRPC code named
      ASSERT_EQ(lines.size(), 1u) << args[0] << ": " << describe(r);
      EXPECT_EQ(lines[0].find("event")->as_string(), "error") << args[0];
      EXPECT_EQ(lines[0].find("code")->as_string(), "UNAVAILABLE") << args[0];
      EXPECT_EQ(lines[0].find("exit_code")->as_int(), 3) << args[0];
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

// ---- issue 11: the bad-input table ---------------------------------------------------------

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// Aliases of aliases: 9 levels of 9 make 387 million values when expanded.
std::string billion_laughs() {
  std::string y = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int i = 1; i <= 9; ++i) {
    const std::string prev = "*a" + std::to_string(i - 1);
    y += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [" + prev;
    for (int k = 1; k < 9; ++k) y += ", " + prev;
    y += "]\n";
  }
  return y;
}

std::string config_json(const std::string& field, int64_t value) {
  Json j = *Json::parse(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256})");
  j.set(field, value);
  return j.dump();
}

// A tiny-preset HF model directory whose weights hold a NaN.
std::string nan_model(const std::string& dir) {
  const ModelConfig cfg = *preset_config("tiny");
  auto store = HostStore::create(build_param_schemas(cfg), MemoryLayout::kExact, false, default_host_allocator());
  init_weights(cfg, **store, 1);
  (*store)->unit(1).master[0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(export_hf_model(dir, cfg, **store, false, 0).ok());
  return dir;
}

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  const size_t nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

struct Row {
  std::string name;
  std::vector<std::string> args;  // args[0] == "megatraind": the daemon binary, else megatrain
  int rc;
  std::string needle;  // in the error's line (the last of stderr), or in stdout for exit 0
  bool remote = false;  // append --server of the test daemon
};

TEST(CliBadInput, TableOfRefusalsWithExitCodesAndTheDaemonServingAfterEach) {
  DaemonProcess d("bad_table");
  ASSERT_TRUE(d.ok());
  const std::string dir = fresh_dir("bad_table_specs");  // not the daemon's state directory
  const std::string spec = tiny_spec_yaml(3);
  auto file = [&](const std::string& name, const std::string& text) { return write_file(dir + "/" + name, text); };
  const std::string steps = file("steps.yaml", replaced(spec, "steps: 3", "steps: 99999999999999999999"));
  const std::string wd = file("wd.yaml", replaced(spec, "weight_decay: 0.0", "weight_decay: 1e300"));
  const std::string eps = file("eps.yaml", replaced(spec, "grad_clip: 1.0", "grad_clip: 1.0, eps: 1e300"));
  const std::string inf = file("inf.yaml", replaced(spec, "grad_clip: 1.0", "grad_clip: 1.0, eps: 1e999"));
  const std::string laughs = file("laughs.yaml", billion_laughs());
  const std::string big = file("big.yaml", spec + "# " + std::string(2 << 20, 'x') + "\n");
  const std::string nul = file("nul.yaml", "name: a" + std::string(1, '\0') + "b\n" + spec);
  fs::create_directories(d.data_root());
  const std::string layers_cfg = write_file(d.data_root() + "/layers.json", config_json("num_hidden_layers", 67108864));
  const std::string hidden_cfg = write_file(d.data_root() + "/hidden.json", config_json("hidden_size", 1 << 30));
  const std::string vocab_cfg = write_file(d.data_root() + "/vocab.json", config_json("vocab_size", 1 << 30));
  auto with_config = [&](const std::string& name, const std::string& cfg) {
    return file(name, replaced(spec, "model: {preset: tiny}", "model: {hf_config: " + cfg + "}"));
  };
  const std::string layers = with_config("layers.yaml", layers_cfg), hidden = with_config("hidden.yaml", hidden_cfg),
                    vocab = with_config("vocab.yaml", vocab_cfg);
  const std::string explode = file("explode.yaml", replaced(replaced(replaced(spec, "lr: 3.0e-3", "lr: 1.0e30"),
                                                                     "warmup_steps: 2", "warmup_steps: 0"),
                                                            "every: 0", "every: 1"));
  const std::string nan_dir = nan_model(dir + "/nan_model");
  const std::string tokens = file("tokens.bin", std::string(512, '\0'));
  // A finished run's checkpoint, an earlier export and a directory holding someone's files.
  const std::string run = dir + "/run";
  ASSERT_EQ(megatrain({"train", file("ok.yaml", spec), "--out", run}).rc, 0);
  const std::string ckpt = run + "/checkpoints";
  const std::string exported = dir + "/exported";
  ASSERT_EQ(megatrain({"export", ckpt, exported}).rc, 0);
  fs::create_directories(dir + "/notes");
  file("notes/README", "mine\n");

  const std::vector<Row> rows = {
      // 5: numbers that overflow their field, non-finite training and evaluation.
      {"steps overflow (train)", {"train", steps}, 2, "steps = 1e+20 is out of range"},
      {"steps overflow (submit)", {"submit", steps}, 2, "steps = 1e+20 is out of range", true},
      {"weight_decay 1e300 (train)", {"train", wd}, 2, "optimizer.weight_decay = 1e+300 is out of range for a 32-bit float"},
      {"weight_decay 1e300 (submit)", {"submit", wd}, 2, "optimizer.weight_decay = 1e+300 is out of range", true},
      {"eps 1e300 (plan)", {"plan", eps}, 2, "optimizer.eps = 1e+300 is out of range"},
      {"eps 1e999 (train)", {"train", inf}, 2, "number '1e999' is out of range"},
      {"loss turns non-finite", {"train", explode, "--out", dir + "/explode"}, 1, "step 2: the loss is not finite"},
      {"eval of NaN weights", {"eval", "--model", nan_dir, "--data", tokens, "--format", "uint16", "--seq-len", "16"}, 1,
       "holds nan at element 0 of its part 0"},
      // 6: unbounded inputs.
      {"billion laughs (plan)", {"plan", laughs}, 2, "more than 10000 values"},
      {"billion laughs (train)", {"train", laughs}, 2, "more than 10000 values"},
      {"billion laughs (submit)", {"submit", laughs}, 2, "more than 10000 values", true},
      {"2 MiB spec", {"train", big}, 2, "the limit for this file is 1048576"},
      {"a NUL byte (train)", {"train", nul}, 2, "a NUL byte at offset 7"},
      {"a NUL byte (submit)", {"submit", nul}, 2, "a NUL byte at offset 7", true},
      {"2^26 layers (plan)", {"plan", layers}, 2, "'num_hidden_layers' = 67108864 exceeds the limit of 1024"},
      {"2^26 layers (remote plan)", {"plan", layers}, 2, "'num_hidden_layers' = 67108864 exceeds the limit of 1024", true},
      {"2^30 hidden (plan)", {"plan", hidden}, 2, "'hidden_size' = 1073741824 exceeds the limit of 65536"},
      {"2^30 vocab (submit)", {"submit", vocab}, 2, "'vocab_size' = 1073741824 exceeds the limit of 1048576", true},
      // 7: destructive export.
      {"export C C", {"export", ckpt, ckpt}, 2, "is a training checkpoint"},
      {"export into the checkpoint dir itself", {"export", ckpt, ckpt + "/" + last_line(*read_file(ckpt + "/latest"))}, 2,
       "is a training checkpoint"},
      {"export C C --overwrite", {"export", ckpt, ckpt, "--overwrite"}, 2, "is a training checkpoint"},
      {"export into the run's directory --overwrite", {"export", ckpt, run, "--overwrite"}, 2,
       "is a training run's directory"},
      {"export over an earlier export", {"export", ckpt, exported}, 2, "already holds files; pass --overwrite"},
      {"export into a directory of other files", {"export", ckpt, dir + "/notes"}, 2, "already holds files"},
      {"export --overwrite", {"export", ckpt, exported, "--overwrite"}, 0, "exported"},
      // 8: addresses.
      {"--server port 99999", {"list", "--server", "127.0.0.1:99999"}, 2, "--server = '127.0.0.1:99999': port 99999 is not in 1..65535"},
      {"--server without a port", {"list", "--server", "localhost"}, 2, "no port"},
      {"--server port 0", {"status", "1", "--server=127.0.0.1:0"}, 2, "not in 1..65535"},
      {"megatraind --listen port 99999", {"megatraind", "--listen=127.0.0.1:99999"}, 2, "--listen = '127.0.0.1:99999': port 99999 is not in 0..65535"},
      {"megatraind --metrics_listen no host", {"megatraind", "--metrics_listen=:9464"}, 2, "--metrics_listen = ':9464': no host"},
      {"megatraind --listen not a port", {"megatraind", "--listen=127.0.0.1:grpc"}, 2, "port 'grpc' is not a number"},
      // Issue 24.7: numbers on the command line are decimal integers, strictly.
      {"--priority 0x10", {"submit", file("p.yaml", spec), "--priority", "0x10"}, 2,
       "--priority = '0x10' must be a decimal integer", true},
      {"--priority ' 5'", {"submit", file("p.yaml", spec), "--priority", " 5"}, 2, "--priority = ' 5' must be a decimal", true},
      {"--priority 1e3", {"submit", file("p.yaml", spec), "--priority", "1e3"}, 2, "must be a decimal integer", true},
      {"--priority 2^31", {"submit", file("p.yaml", spec), "--priority", "2147483648"}, 2,
       "from -2147483648 to 2147483647", true},
      {"--since 0x10", {"logs", "job-000001", "--since", "0x10"}, 2, "--since = '0x10'", true},
      {"--since ' 5'", {"logs", "job-000001", "--since", " 5"}, 2, "--since = ' 5'", true},
      {"--since 1.5h", {"logs", "job-000001", "--since", "1.5h"}, 2, "a whole number of s, m, h or d ago", true},
      {"--tail +3", {"logs", "job-000001", "--tail", "+3"}, 2, "--tail = '+3' must be a decimal integer", true},
      {"--steps 1e2", {"train", file("ok2.yaml", spec), "--steps", "1e2"}, 2, "--steps = '1e2' must be a decimal integer"},
      {"--steps 0", {"train", file("ok2.yaml", spec), "--steps", "0"}, 2, "--steps = '0' must be a decimal integer from 1"},
      {"--devices 2.0", {"train", file("ok2.yaml", spec), "--devices", "2.0"}, 2, "--devices = '2.0'"},
      {"--seq-len 0x20", {"plan", file("ok2.yaml", spec), "--seq-len", "0x20"}, 2, "--seq-len = '0x20'"},
      // Decimal numbers too: sscanf read 0x10 as 16 and 400abc as 400, strtod abc as 0 (the
      // NVMe verdict then silently gone) and inf as an infinite device.
      {"--device-tflops 0x10", {"plan", file("ok2.yaml", spec), "--device-tflops", "0x10"}, 2,
       "--device-tflops = '0x10' must be a decimal number above 0"},
      {"--device-tflops 400abc", {"plan", file("ok2.yaml", spec), "--device-tflops", "400abc"}, 2, "--device-tflops = '400abc'"},
      {"--device-tflops inf", {"plan", file("ok2.yaml", spec), "--device-tflops", "inf"}, 2, "--device-tflops = 'inf'"},
      {"--device-tflops 1e400", {"plan", file("ok2.yaml", spec), "--device-tflops", "1e400"}, 2, "--device-tflops = '1e400'"},
      {"--nvme-gbps abc", {"plan", file("ok2.yaml", spec), "--offload", "nvme", "--nvme-gbps", "abc"}, 2, "--nvme-gbps = 'abc'"},
      {"--nvme-gbps 12abc", {"plan", file("ok2.yaml", spec), "--offload", "nvme", "--nvme-gbps", "12abc"}, 2,
       "--nvme-gbps = '12abc'"},
      {"--chunk-tokens ' 8'", {"push", "job-000001", tokens, "--format", "tokens-u16", "--chunk-tokens", " 8"}, 2,
       "--chunk-tokens = ' 8'", true},
      {"--eod-id 1e12", {"eval", "--model", ckpt, "--data", tokens, "--format", "uint16", "--eod-id", "1e12"}, 2,
       "--eod-id = '1e12' must be a decimal integer"},
      // 13: every command answers --help / -h with its own usage.
      {"eval --help", {"eval", "--help"}, 0, "usage: megatrain eval --model DIR"},
      {"export -h", {"export", "-h"}, 0, "usage: megatrain export CHECKPOINT OUT_DIR"},
  };
  const std::string daemon_state = fresh_dir("bad_table_daemon_state");
  for (const Row& row : rows) {
    std::vector<std::string> args = row.args;
    RunResult r;
    if (args[0] == "megatraind") {
      args[0] = mt::testing_util::megatraind();
      args.push_back("--state_dir=" + daemon_state);
      if (row.name.find("metrics") == std::string::npos) args.push_back("--metrics_listen=");
      r = run_process(args, {}, 30);
    } else {
      r = row.remote ? d.cli(args) : megatrain(args);
    }
    EXPECT_EQ(r.rc, row.rc) << row.name << ": " << describe(r);
    const std::string where = row.rc == 0 ? r.out : last_line(r.err);
    EXPECT_NE(where.find(row.needle), std::string::npos) << row.name << ": " << describe(r);
    if (row.rc != 0 && args[0] != mt::testing_util::megatraind()) {
      EXPECT_EQ(where.rfind("megatrain: ", 0), 0u) << row.name << ": " << where;
    }
    RunResult alive = d.cli({"list", "--json"});
    EXPECT_EQ(alive.rc, 0) << "daemon not serving after " << row.name << ": " << describe(alive);
  }
  // The failed run kept its last good checkpoint (step 1); export C C left the checkpoint intact.
  auto latest = read_file(dir + "/explode/checkpoints/latest");
  ASSERT_TRUE(latest.ok());
  auto state = Json::parse(*read_file(dir + "/explode/checkpoints/" + last_line(*latest) + "/trainer_state.json"));
  EXPECT_EQ(state->find("step")->as_int(), 1);
  RunResult eval_ckpt = megatrain({"eval", "--model", ckpt, "--data", tokens, "--format", "uint16", "--seq-len", "16"});
  EXPECT_EQ(eval_ckpt.rc, 0) << describe(eval_ckpt);
  // Varied tokens with a 0 every 5th: --eod-id 0 cuts documents of 5 tokens, which changes the loss.
  std::string varied;
  for (int i = 0; i < 256; ++i) {
    const uint16_t t = i % 5 == 4 ? 0 : uint16_t(1 + (i * 37) % 200);
    varied.append(reinterpret_cast<const char*>(&t), 2);
  }
  const std::string docs = file("docs.bin", varied);
  RunResult eval_whole = megatrain({"eval", "--model", ckpt, "--data", docs, "--format", "uint16", "--seq-len", "16"});
  RunResult eval_docs = megatrain({"eval", "--model", ckpt, "--data", docs, "--format", "uint16", "--seq-len", "16",
                                   "--eod-id", "0"});
  EXPECT_EQ(eval_whole.rc, 0) << describe(eval_whole);
  EXPECT_EQ(eval_docs.rc, 0) << describe(eval_docs);
  EXPECT_NE(eval_docs.out, eval_whole.out);
  RunResult eval_bad = megatrain({"eval", "--model", ckpt, "--data", tokens, "--format", "uint16", "--eod-id", "1e12"});
  EXPECT_EQ(eval_bad.rc, 2) << describe(eval_bad);
  EXPECT_NE(eval_bad.err.find("--eod-id"), std::string::npos) << describe(eval_bad);
  fs::remove_all(dir);
  fs::remove_all(daemon_state);
}

// Issue 11, point 13: every command, local and remote, answers --help and -h with its usage.
TEST(CliErrors, EveryCommandAnswersHelp) {
  for (const char* cmd : {"train", "plan", "eval", "inspect", "export", "submit", "list", "status", "watch", "cancel",
                          "checkpoint", "push"})
    for (const char* flag : {"--help", "-h"}) {
      RunResult r = megatrain({cmd, flag});
      EXPECT_EQ(r.rc, 0) << cmd << " " << flag << ": " << describe(r);
      EXPECT_EQ(r.out.rfind(std::string("usage: megatrain ") + cmd, 0), 0u) << cmd << ": " << r.out;
    }
}

// Issue 11, point 13: SIGTERM to a foreground train checkpoints and exits, like Ctrl-C.
TEST(CliTrain, SigtermCheckpointsAndExits) {
  const std::string dir = fresh_dir("sigterm");
  const std::string spec = write_file(dir + "/spec.yaml", tiny_spec_yaml(100000));
  const std::string out = dir + "/out.jsonl";
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, STDOUT_FILENO);
    std::vector<std::string> a = {mt::testing_util::megatrain_cli(), "train", spec, "--out", dir + "/run", "--json"};
    std::vector<char*> args;
    for (auto& s : a) args.push_back(s.data());
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  auto text_of = [&] { return read_file(out).ok() ? *read_file(out) : std::string(); };
  while (std::chrono::steady_clock::now() < end && text_of().find("\"step\"") == std::string::npos)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  const std::string text = *read_file(out);
  EXPECT_NE(last_line(text).find("\"cancelled\":true"), std::string::npos) << text;
  EXPECT_TRUE(fs::exists(dir + "/run/checkpoints/latest"));
  fs::remove_all(dir);
}

// Issue 11, point 10: the CLI's offline plan and the daemon's PlanJob give one answer.
TEST(CliPlan, LocalPlanEqualsTheDaemonPlan) {
  DaemonProcess d("plan_agree");
  ASSERT_TRUE(d.ok());
  const std::string dir = fresh_dir("plan_agree_specs");
  for (const char* preset : {"dense-120b", "llama3-8b", "tiny"})
    for (const char* extra : {"memory: {layout: compact}\nbackend: cuda\nprecision: bf16\n", "precision: fp32\n"}) {
      std::string text = replaced(tiny_spec_yaml(10), "model: {preset: tiny}", std::string("model: {preset: ") + preset + "}");
      text = replaced(text, "backend: cpu\n", extra);
      const std::string spec = write_file(dir + "/spec.yaml", text);
      RunResult local = megatrain({"plan", spec, "--json", "--host-memory", "8GiB"});
      RunResult remote = d.cli({"plan", spec, "--json"});
      const Json l = local.json_lines().at(0), r = remote.json_lines().at(0);
      const int rc = l.find("fits")->as_bool() ? 0 : 2;  // a plan that does not fit: RESOURCE_EXHAUSTED's code
      EXPECT_EQ(local.rc, rc) << describe(local);
      EXPECT_EQ(remote.rc, rc) << describe(remote);
      for (const char* key : {"params", "host_bytes", "device_bytes", "fits"})
        EXPECT_EQ(l.find(key)->dump(), r.find(key)->dump()) << preset << " " << extra << key;
      // The longest sequence that fits (issue 14): the same search on both sides.
      if (std::string(preset) == "llama3-8b") {
        RunResult lm = megatrain({"plan", spec, "--json", "--host-memory", "8GiB", "--max-seq-len"});
        RunResult rm = d.cli({"plan", spec, "--json", "--max-seq-len"});
        if (lm.rc == 0 || rm.rc == 0) {
          ASSERT_EQ(lm.rc, 0) << describe(lm);
          ASSERT_EQ(rm.rc, 0) << describe(rm);
          EXPECT_EQ(lm.json_lines().at(0).find("max_seq_len")->dump(), rm.json_lines().at(0).find("max_seq_len")->dump());
        } else {  // 8 GiB holds no 8B model: both refuse alike, saying what does not fit
          EXPECT_EQ(lm.rc, rm.rc) << describe(lm) << describe(rm);
          EXPECT_NE(lm.err.find("not even seq_len = 1 fits the budgets: host memory: needs"), std::string::npos)
              << describe(lm);
        }
      }
      if (std::string(preset) == "tiny") {
        RunResult lm = megatrain({"plan", spec, "--json", "--host-memory", "8GiB", "--max-seq-len"});
        RunResult rm = d.cli({"plan", spec, "--json", "--max-seq-len"});
        ASSERT_EQ(lm.rc, 0) << describe(lm);
        ASSERT_EQ(rm.rc, 0) << describe(rm);
        const Json lj = lm.json_lines().at(0), rj = rm.json_lines().at(0);
        EXPECT_EQ(lj.find("max_seq_len")->dump(), rj.find("max_seq_len")->dump());
        EXPECT_EQ(lj.find("host_bytes")->dump(), rj.find("host_bytes")->dump());
        EXPECT_GT(lj.find("max_seq_len")->as_int(), 64);
      }
      // Compact state (10 B/param) plus, in bf16, the 2-byte shadow the uploads copy.
      if (std::string(preset) == "dense-120b" && std::string(extra).find("compact") != std::string::npos) {
        EXPECT_LT(r.find("host_bytes_per_param")->as_double(), 12.5) << remote.out;
        EXPECT_GT(r.find("host_bytes_per_param")->as_double(), 12.0) << remote.out;
        EXPECT_EQ(r.find("precision")->as_string(), "bf16") << remote.out;
      }
    }
  fs::remove_all(dir);
}

// A flag the command does not know is refused naming it (exit 2, nothing run): `--step 5` and
// `--output DIR` for train ran all the spec's steps into the default directory, and `--dtyp fp32`
// exported bf16. A flag must match a whole name of the usage line, not a prefix of one.
// Under a file size limit (ulimit -f), a checkpoint past it is an error naming the file and exit
// 1, not SIGXFSZ ending the run mid-write.
TEST(CliTrain, ACheckpointPastTheFileSizeLimitIsAnErrorNotASignal) {
  const std::string dir = fresh_dir("file_size_limit");
  const std::string spec = write_file(dir + "/spec.yaml", tiny_spec_yaml(2));
  const RunResult r = run_process({"/bin/bash", "-c", "ulimit -f 2048 && exec \"$0\" \"$@\"",
                                   mt::testing_util::megatrain_cli(), "train", spec, "--out", dir + "/run"});
  EXPECT_EQ(r.rc, 1) << describe(r);
  EXPECT_NE(r.err.find("File too large"), std::string::npos) << describe(r);
  if (!HasFailure()) fs::remove_all(dir);
}

TEST(CliErrors, AnUnknownFlagIsRefusedNamingItBeforeAnythingRuns) {
  const std::string dir = fresh_dir("cli_unknown_flag");
  const std::string spec = write_file(dir + "/spec.yaml", tiny_spec_yaml(3));
  for (const auto& [args, flag] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"train", spec, "--out", dir + "/run", "--step", "1"}, "--step"},
           {{"train", spec, "--output", dir + "/run"}, "--output"},
           {{"train", spec, "--out", dir + "/run", "--server", "127.0.0.1:1"}, "--server"},
           {{"export", dir + "/run", dir + "/x", "--dtyp", "fp32"}, "--dtyp"},
           {{"list", "--stat", "running"}, "--stat"},
           {{"train", spec, "--out", dir + "/run", "--bogus"}, "--bogus"},  // last, before --json: no value
           {{"plan", spec, "--bogus"}, "--bogus"}}) {
    std::vector<std::string> argv = args;
    argv.push_back("--json");
    RunResult r = megatrain(argv);
    EXPECT_EQ(r.rc, 2) << describe(r);
    auto lines = r.json_lines();
    ASSERT_EQ(lines.size(), 1u) << describe(r);
    EXPECT_NE(lines[0].find("message")->as_string().find("unknown flag " + flag + " for"), std::string::npos)
        << describe(r);
  }
  EXPECT_FALSE(fs::exists(dir + "/run"));
  EXPECT_EQ(megatrain({"train", spec, "--out", dir + "/run", "--steps", "1", "--json"}).rc, 0);
}

// A flag given twice is refused (`--out a --out b` wrote to b, silently); a known flag as the last
// argument needs a value; eval's --format is a usage error naming the flag.
TEST(CliErrors, ARepeatedFlagAMissingValueAndABadEvalFormatAreUsageErrors) {
  const std::string dir = fresh_dir("cli_repeated_flag");
  const std::string spec = write_file(dir + "/spec.yaml", tiny_spec_yaml(3));
  RunResult twice = megatrain({"train", spec, "--out", dir + "/a", "--out", dir + "/b"});
  EXPECT_EQ(twice.rc, 2) << describe(twice);
  EXPECT_NE(twice.err.find("flag --out is given twice"), std::string::npos) << describe(twice);
  EXPECT_FALSE(fs::exists(dir + "/a") || fs::exists(dir + "/b"));
  RunResult last = megatrain({"train", spec, "--out"});
  EXPECT_EQ(last.rc, 2) << describe(last);
  EXPECT_NE(last.err.find("flag --out needs a value"), std::string::npos) << describe(last);
  RunResult format = megatrain({"eval", "--model", dir, "--data", spec, "--format", "foo"});
  EXPECT_EQ(format.rc, 2) << describe(format);
  EXPECT_NE(format.err.find("--format = 'foo' is not one of text, uint16, uint32, llmc"), std::string::npos)
      << describe(format);
}

// `train SPEC --out --json` trained into a directory named "--json" (found by an adversarial CLI
// campaign): a flag's separate value may not itself look like a flag; --out=--json still names it.
TEST(CliErrors, AFlagWhoseValueLooksLikeAFlagIsRefused) {
  const std::string dir = fresh_dir("cli_flag_as_value");
  const std::string spec = write_file(dir + "/spec.yaml", tiny_spec_yaml(1));
  for (const std::vector<std::string>& args : {std::vector<std::string>{"train", spec, "--out", "--json"},
                                               {"train", spec, "--out", "--steps", "1", "--json"},
                                               {"export", dir + "/run", dir + "/x", "--dtype", "--json"}}) {
    RunResult r = megatrain(args);
    EXPECT_EQ(r.rc, 2) << describe(r);
    EXPECT_NE((r.out + r.err).find("needs a value, not the flag --"), std::string::npos) << describe(r);
  }
  EXPECT_FALSE(fs::exists("--json"));
  EXPECT_FALSE(fs::exists(dir + "/--json"));
}

}  // namespace
}  // namespace mt::cli::testing

// The run's directory of `megatrain train`: held by one run at a time (two runs on one --out
// published each other's checkpoints and both exited 0), refused before any training when it
// cannot be written, never outside what was named (an empty --out, a name with '/', a checkpoint
// directory given for the run's), and a reader that goes away stops the run with a checkpoint.
#include <filesystem>

#include "engine/base/file_lock.h"
#include "tests/cli/cli_fixture.h"
#include "tests/test_paths.h"

namespace mt::cli::testing {
namespace {

namespace fs = std::filesystem;

std::string error_message(const RunResult& r) {
  auto lines = r.json_lines();
  return !lines.empty() && lines.back().find("message") ? lines.back().find("message")->as_string() : "";
}

long step_events(const RunResult& r) {
  long n = 0;
  for (const Json& j : r.json_lines()) n += j.find("event") && j.find("event")->as_string() == "step";
  return n;
}

TEST(CliTrainDir, ADirectoryHeldByAnotherRunIsRefusedBeforeAnyStep) {
  const std::string dir = fresh_dir("train_dir_held");
  const std::string spec = write_file(dir + "/spec.yaml", tiny_spec_yaml(3));
  fs::create_directories(dir + "/run");
  auto held = FileLock::acquire(dir + "/run/.megatrain.lock", "held", "by the test");  // as a live run does
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  RunResult r = megatrain({"train", spec, "--json", "--out", dir + "/run"});
  EXPECT_EQ(r.rc, 1) << describe(r);
  EXPECT_NE(error_message(r).find("in use by another training run (pid " + std::to_string(::getpid())), std::string::npos)
      << describe(r);
  EXPECT_EQ(step_events(r), 0) << describe(r);
  EXPECT_FALSE(fs::exists(dir + "/run/checkpoints/latest"));
  held->reset();  // released: the run goes ahead
  RunResult ok = megatrain({"train", spec, "--json", "--out", dir + "/run"});
  EXPECT_EQ(ok.rc, 0) << describe(ok);
  EXPECT_EQ(step_events(ok), 3);
}

// The directory a run trained into is what a user hands the commands that read its checkpoint:
// inspect and export take it for its checkpoints/ (before: "holds neither model.safetensors ..."
// and "no config.json").
TEST(CliTrainDir, TheRunsDirectoryStandsForItsCheckpoints) {
  const std::string dir = fresh_dir("train_dir_reads");
  const std::string spec = write_file(dir + "/spec.yaml", tiny_spec_yaml(2));
  ASSERT_EQ(megatrain({"train", spec, "--out", dir + "/run"}).rc, 0);
  RunResult by_run = megatrain({"inspect", dir + "/run", "--json"});
  RunResult by_root = megatrain({"inspect", dir + "/run/checkpoints", "--json"});
  ASSERT_EQ(by_run.rc, 0) << describe(by_run);
  EXPECT_EQ(by_run.out, by_root.out);
  EXPECT_NE(by_run.out.find("optimizer"), std::string::npos) << by_run.out;
  RunResult exported = megatrain({"export", dir + "/run", dir + "/hf"});
  ASSERT_EQ(exported.rc, 0) << describe(exported);
  EXPECT_TRUE(fs::exists(dir + "/hf/config.json"));
  RunResult again = megatrain({"train", spec, "--out", dir + "/run"});  // the run's own --out still resumes
  EXPECT_EQ(again.rc, 0) << describe(again);
  if (!HasFailure()) fs::remove_all(dir);
}

TEST(CliTrainDir, UnusableOrMisnamedDirectoriesAreRefusedBeforeAnyStep) {
  const std::string dir = fresh_dir("train_dir_bad");
  const std::string spec = write_file(dir + "/spec.yaml", tiny_spec_yaml(3));
  const std::string file = write_file(dir + "/afile", "not a directory");
  RunResult not_dir = megatrain({"train", spec, "--json", "--out", file});
  EXPECT_EQ(not_dir.rc, 1) << describe(not_dir);
  EXPECT_NE(error_message(not_dir).find("Not a directory"), std::string::npos) << describe(not_dir);
  EXPECT_EQ(step_events(not_dir), 0) << describe(not_dir);

  RunResult empty = megatrain({"train", spec, "--json", "--out="});
  EXPECT_EQ(empty.rc, 2) << describe(empty);
  EXPECT_NE(error_message(empty).find("--out is empty"), std::string::npos) << describe(empty);

  std::string yaml = tiny_spec_yaml(3);
  yaml.replace(0, yaml.find('\n'), "name: \"../../escaped\"");  // the default megatrain-runs/NAME
  const std::string escaping = write_file(dir + "/escaping.yaml", yaml);
  RunResult named = megatrain({"train", escaping, "--json"});
  EXPECT_EQ(named.rc, 2) << describe(named);
  EXPECT_NE(error_message(named).find("plain directory name"), std::string::npos) << describe(named);

  ASSERT_EQ(megatrain({"train", spec, "--json", "--out", dir + "/run"}).rc, 0);
  RunResult nested = megatrain({"train", spec, "--json", "--out", dir + "/run/checkpoints"});
  EXPECT_EQ(nested.rc, 2) << describe(nested);
  EXPECT_NE(error_message(nested).find("is a checkpoint directory"), std::string::npos) << describe(nested);
  EXPECT_FALSE(fs::exists(dir + "/run/checkpoints/checkpoints"));
}

// `megatrain train ... --json | head -1`: the run stops at its next step with a checkpoint and
// exits 0 (SIGPIPE killed it with none).
TEST(CliTrainDir, AReaderThatGoesAwayStopsTheRunWithACheckpoint) {
  const std::string dir = fresh_dir("train_dir_pipe");
  const std::string spec = write_file(dir + "/spec.yaml", tiny_spec_yaml(100000));
  RunResult r = run_process({"/bin/bash", "-c",
                             std::string(mt::testing_util::megatrain_cli()) + " train " + spec + " --json --out " + dir +
                                 "/run | head -1 >/dev/null; exit ${PIPESTATUS[0]}"});
  EXPECT_EQ(r.rc, 0) << describe(r);
  auto latest = read_file(dir + "/run/checkpoints/latest");
  EXPECT_TRUE(latest.ok()) << "no checkpoint: " << describe(r);
}

// Ctrl-C stops at the next step with a checkpoint; a user who cannot wait for that (a long step,
// a large write) presses it again and the run ends at once, by the signal, leaving the last whole
// checkpoint to resume from. The run is held blocked printing a step (train_and_kill), so without
// the second press's effect it would not end at all.
TEST(CliTrainDir, ASecondCtrlCStopsAtOnceAndTheLastCheckpointResumes) {
  const std::string dir = fresh_dir("train_dir_ctrl_c");
  std::string yaml = tiny_spec_yaml(40);
  yaml.replace(yaml.find("every: 0"), 8, "every: 2");
  const std::string spec = write_file(dir + "/spec.yaml", yaml);
  const KilledRun stopped = train_and_kill(spec, dir + "/run", 5, SIGINT);
  ASSERT_GE(stopped.step, 5) << "the run did not end by SIGINT: " << stopped.seen;
  RunResult resumed = megatrain({"train", spec, "--json", "--out", dir + "/run"});
  EXPECT_EQ(resumed.rc, 0) << describe(resumed);
  EXPECT_LT(step_events(resumed), 40) << "it started over: " << describe(resumed);
  EXPECT_EQ(*read_file(dir + "/run/checkpoints/latest"), "step-00000040\n");
}

// One Ctrl-C can arrive twice (the terminal's and a launcher's forwarded copy, within
// milliseconds): a second signal within 250 ms of the first is taken for the same press, so the
// run is not ended without its checkpoint by a single keystroke. Pressed every 30 ms, the run
// either stops cleanly at its step boundary (exit 0: the presses within 250 ms were one) or is
// ended by a press no sooner than 250 ms after the first; without the rule the second press, 30 ms
// after the first, ended it.
TEST(CliTrainDir, ASignalDeliveredTwiceAtOnceIsOnePress) {
  const std::string dir = fresh_dir("train_dir_ctrl_c_twice");
  const std::string spec = write_file(dir + "/spec.yaml", tiny_spec_yaml(40));
  const KilledRun stopped = train_and_kill(spec, dir + "/run", 3, SIGINT, 30);
  if (stopped.exit_code == 0) return;  // stopped cleanly before a later press
  ASSERT_GE(stopped.step, 3) << "the run neither stopped cleanly nor ended by SIGINT: " << stopped.seen;
  EXPECT_GE(stopped.signalled_s, 0.25);
}

}  // namespace
}  // namespace mt::cli::testing

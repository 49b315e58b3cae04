// `init: {from: CHECKPOINT}` in a new run: it continues that run (moments, step count, and the
// data position when the data is the same), and refuses a span that run has already reached,
// which trained nothing and reported success; `weights_only: true` reads the weights alone and
// equals starting from an fp32 export of them.
#include "engine/io/checkpoint.h"
#include "tests/cli/cli_fixture.h"

namespace mt::cli::testing {
namespace {

// A spec of `steps` steps starting from `init` (the YAML flow mapping's inside).
std::string spec_from(const std::string& dir, const std::string& name, long steps, const std::string& init,
                      const std::string& data = "{source: synthetic, seed: 1}") {
  std::string yaml = tiny_spec_yaml(steps, data);
  yaml.replace(yaml.find("init: {seed: 1}"), 15, "init: {" + init + "}");
  return write_file(dir + "/" + name + ".yaml", yaml);
}

Json summary_of(const RunResult& r) {
  auto lines = r.json_lines();
  return lines.empty() ? Json::object() : lines.back();
}

std::string final_loss(const RunResult& r) {
  const Json s = summary_of(r);
  return s.find("final_loss") ? s.find("final_loss")->dump() : "none";
}

// The data position of the run's latest checkpoint.
uint64_t data_cursor(const std::string& run) {
  auto dir = resolve_checkpoint(run + "/checkpoints");
  auto state = dir.ok() ? read_trainer_state(*dir) : Result<TrainerState>(dir.status());
  return state.ok() ? state->data_cursor : ~uint64_t(0);
}

// Run A: 3 steps from seed 1, its checkpoints in DIR/a.
std::string train_a(const std::string& dir) {
  RunResult a = megatrain({"train", write_file(dir + "/a.yaml", tiny_spec_yaml(3)), "--json", "--out", dir + "/a"});
  EXPECT_EQ(a.rc, 0) << describe(a);
  return dir + "/a/checkpoints";
}

TEST(CliTrainInitFrom, ACheckpointContinuesItsRunAndASpanItReachedIsRefused) {
  const std::string dir = fresh_dir("init_from_continue");
  const std::string a = train_a(dir);
  RunResult shorter = megatrain({"train", spec_from(dir, "b2", 2, "from: " + a), "--json", "--out", dir + "/b2"});
  EXPECT_EQ(shorter.rc, 2) << describe(shorter);  // it trained nothing and said it succeeded
  EXPECT_NE(shorter.err.find("is at step 3"), std::string::npos) << describe(shorter);
  EXPECT_NE(shorter.err.find("init.weights_only: true"), std::string::npos) << describe(shorter);

  RunResult on = megatrain({"train", spec_from(dir, "b5", 5, "from: " + a), "--json", "--out", dir + "/b5"});
  ASSERT_EQ(on.rc, 0) << describe(on);
  EXPECT_NE(on.err.find("starting at step 3 of"), std::string::npos) << describe(on);
  EXPECT_EQ(summary_of(on).find("steps")->dump(), "5");
  EXPECT_EQ(on.err.find("the data is not what"), std::string::npos) << "the same data: " << describe(on);
  EXPECT_EQ(data_cursor(dir + "/b5"), data_cursor(dir + "/a") * 5 / 3) << "its data position continued";
  if (!HasFailure()) fs::remove_all(dir);
}

// Continuing at another run's data position in other data would skip that many rows (or whole
// epochs) of it: the run reads it from the start, and says so.
TEST(CliTrainInitFrom, ACheckpointOverOtherDataReadsItFromItsStart) {
  const std::string dir = fresh_dir("init_from_other_data");
  const std::string a = train_a(dir);
  RunResult b = megatrain({"train", spec_from(dir, "b", 5, "from: " + a, "{source: synthetic, seed: 2}"), "--json",
                           "--out", dir + "/b"});
  ASSERT_EQ(b.rc, 0) << describe(b);
  EXPECT_NE(b.err.find("this run reads it from its first row"), std::string::npos) << describe(b);
  EXPECT_EQ(data_cursor(dir + "/b"), data_cursor(dir + "/a") * 2 / 3) << "2 steps' rows from the start";
  if (!HasFailure()) fs::remove_all(dir);
}

TEST(CliTrainInitFrom, WeightsOnlyIsANewRunFromTheWeightsAsFromTheirExport) {
  const std::string dir = fresh_dir("init_from_weights_only");
  const std::string a = train_a(dir);
  RunResult exported = megatrain({"export", a, dir + "/export", "--dtype", "fp32"});
  ASSERT_EQ(exported.rc, 0) << describe(exported);
  // The weights alone are read: a checkpoint whose optimizer state is gone still starts the run.
  ASSERT_TRUE(fs::remove(dir + "/a/checkpoints/step-00000003/optimizer.safetensors"));

  RunResult w = megatrain({"train", spec_from(dir, "w", 2, "from: " + a + ", weights_only: true"), "--json", "--out",
                           dir + "/w"});
  ASSERT_EQ(w.rc, 0) << describe(w);
  EXPECT_EQ(summary_of(w).find("steps")->dump(), "2");
  EXPECT_EQ(w.err.find("starting at step"), std::string::npos) << describe(w);
  RunResult e = megatrain({"train", spec_from(dir, "e", 2, "from: " + dir + "/export"), "--json", "--out", dir + "/e"});
  ASSERT_EQ(e.rc, 0) << describe(e);
  EXPECT_EQ(final_loss(w), final_loss(e)) << "step 0, moments 0, the data from its start: the export's run";
  EXPECT_NE(final_loss(w), "none");
  for (const char* run : {"w", "e"})
    ASSERT_EQ(megatrain({"export", dir + "/" + run + "/checkpoints", dir + "/" + run + "_out", "--dtype", "fp32"}).rc, 0);
  auto wb = read_file(dir + "/w_out/model.safetensors"), eb = read_file(dir + "/e_out/model.safetensors");
  ASSERT_TRUE(wb.ok() && eb.ok());
  EXPECT_TRUE(*wb == *eb) << "the two runs' weights differ";

  RunResult without = megatrain({"train", spec_from(dir, "x", 2, "weights_only: true"), "--out", dir + "/x"});
  EXPECT_EQ(without.rc, 2) << describe(without);
  EXPECT_NE(without.err.find("init.weights_only needs init.from"), std::string::npos) << describe(without);
  if (!HasFailure()) fs::remove_all(dir);
}

}  // namespace
}  // namespace mt::cli::testing

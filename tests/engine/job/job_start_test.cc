// Where a new run takes its weights from (job_start.h: initial_weights): init.from, else the
// directory model.hf_model names, else the seed. A defect hunt found hf_model's weights never
// read: the run trained the architecture from random weights and said nothing.
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/io/checkpoint.h"
#include "engine/job/job.h"
#include "tests/engine/job/tiny_job.h"
#include "tests/engine/temp_dir.h"

namespace mt {
namespace {

namespace fs = std::filesystem;
using testing_util::TempDir;

// One step's loss (before its update: the starting weights') of `spec` run in `dir`, and its log.
struct FirstStep {
  double loss = 0;
  long steps_run = 0;
  std::string log;
};
FirstStep first_step(JobSpec spec, const std::string& dir) {
  spec.steps = 1;
  FirstStep out;
  JobHooks hooks;
  hooks.on_log = [&](LogLevel, const std::string& m) { out.log += m + "\n"; };
  auto r = JobRunner(spec, dir, hooks).run();
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (r.ok()) out = {r->final_loss, r->steps_run, out.log};
  return out;
}

JobSpec with_model(JobSpec s, const std::string& hf_model, const std::string& hf_config) {
  s.model.preset.clear();
  s.model.hf_model = hf_model;
  s.model.hf_config = hf_config;
  return s;
}

// A trained tiny model as a Hugging Face directory (config.json and model.safetensors of a
// checkpoint, without its trainer state), and the checkpoint itself.
struct TrainedModel {
  std::string hf, checkpoint;
};
TrainedModel trained_model(const TempDir& d, const std::string& name = "a", uint64_t seed = 3) {
  JobSpec spec = testing_util::tiny_spec("resident", 4);
  spec.init.seed = seed;
  EXPECT_TRUE(testing_util::run_stopped_at(spec, d / ("trained-" + name), 2).ok());
  TrainedModel m{d / ("hf-" + name), *resolve_checkpoint(d / ("trained-" + name + "/checkpoints"))};
  fs::create_directories(m.hf);
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(fs::path(m.checkpoint) / f, fs::path(m.hf) / f);
  return m;
}

TEST(JobStart, AModelNamedByHfModelStartsFromItsWeights) {
  TempDir d("mt-start-hf");
  const TrainedModel m = trained_model(d);
  const JobSpec base = testing_util::tiny_spec("resident", 1);
  const FirstStep named = first_step(with_model(base, m.hf, ""), d / "named");
  JobSpec loaded = with_model(base, "", m.hf + "/config.json");
  loaded.init.from = m.hf;
  const FirstStep from = first_step(loaded, d / "from");
  const FirstStep fresh = first_step(with_model(base, "", m.hf + "/config.json"), d / "fresh");
  EXPECT_EQ(named.loss, from.loss) << "hf_model's weights are the ones init.from the same directory loads";
  EXPECT_NE(named.loss, fresh.loss) << "a run of hf_model from the seed's weights";
  EXPECT_NE(named.log.find("weights from " + m.hf), std::string::npos) << named.log;
  EXPECT_NE(fresh.log.find("weights from init.seed 3"), std::string::npos) << fresh.log;
}

// hf_model naming a training checkpoint takes its weights alone: a new run at step 0, not a
// continuation (that is init.from's).
TEST(JobStart, HfModelNamingACheckpointTakesItsWeightsAlone) {
  TempDir d("mt-start-ckpt");
  const TrainedModel m = trained_model(d);
  const JobSpec base = testing_util::tiny_spec("resident", 1);
  const FirstStep named = first_step(with_model(base, m.checkpoint, ""), d / "named");
  const FirstStep hf = first_step(with_model(base, m.hf, ""), d / "hf");
  EXPECT_EQ(named.steps_run, 1);
  EXPECT_EQ(named.loss, hf.loss);
  // init.from wins over hf_model's own weights (another run's, of the same architecture).
  const TrainedModel b = trained_model(d, "b", 5);
  JobSpec other = with_model(base, m.hf, "");
  other.init.from = b.hf;
  const FirstStep from_b = first_step(other, d / "other");
  EXPECT_EQ(from_b.loss, first_step(with_model(base, b.hf, ""), d / "b").loss);
  EXPECT_NE(from_b.loss, hf.loss);
}

}  // namespace
}  // namespace mt

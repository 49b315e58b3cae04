// Where a new run takes its weights from (job_start.h: initial_weights): init.from, else the
// directory model.hf_model names, else the seed; and the tokenizer of pre-tokenized shards,
// compared with the one its weights and its held-out set were tokenized with. A defect hunt found
// hf_model's weights never read (the run trained from random weights and said nothing) and
// shards never compared (their manifest named a tokenizer nobody read).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine/data/jsonl_examples.h"
#include "engine/data/shard_set.h"
#include "engine/io/checkpoint.h"
#include "engine/job/job.h"
#include "engine/job/job_data.h"
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
FirstStep first_step(JobSpec spec, const std::string& dir, long steps = 1) {
  spec.steps = steps;
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

// Weights trained as one model, trained on as another (a config.json's RoPE base edited, say, to
// extend the context): meant at times, so a warning naming the keys, not a refusal.
TEST(JobStart, WeightsOfAnotherModelConfigAreTrainedOnWithAWarning) {
  TempDir d("mt-start-config");
  const TrainedModel m = trained_model(d);
  Json config = *Json::parse(*read_file(m.hf + "/config.json"));
  config.set("rope_theta", 500000);
  std::ofstream(d / "rope.json") << config.dump(2);
  JobSpec spec = with_model(testing_util::tiny_spec("resident", 4), "", d / "rope.json");
  for (const std::string& from : {m.hf, d / "trained-a/checkpoints"}) {  // a model directory; a run continued
    spec.init.from = from;
    const FirstStep run = first_step(spec, d / ("run-" + std::to_string(from.size())), 4);
    EXPECT_NE(run.log.find("were trained as another model than the one this run trains (rope_theta 10000 -> 500000)"),
              std::string::npos) << from << ":\n" << run.log;
  }
  spec.model = with_model(spec, m.hf, "").model;  // its own config: nothing to say
  spec.init.from.clear();
  EXPECT_EQ(first_step(spec, d / "same").log.find("another model"), std::string::npos);
}

const char* const kLines[] = {R"({"prompt": "say one", "completion": " it is one"})",
                              R"({"prompt": "say two", "completion": " it is two"})"};

// `lines` tokenized by `tokenizer` into a shard set at `out`, as megatrain tokenize writes it.
void write_shards(const std::string& tokenizer, const std::string& out) {
  auto tok = open_tokenizer(tokenizer);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  auto fmt = make_line_format(*tok, tokenizer, "auto", "auto");
  ASSERT_TRUE(fmt.ok()) << fmt.status().to_string();
  auto w = ShardSetWriter::create(out, (*tok)->vocab_size(), tokenizer, 1 << 20, *tokenization_fingerprint(**tok, *fmt));
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(w->add(*fmt->format.line(kLines[i % 2])).ok());
  ASSERT_TRUE(w->finish().ok());
}

JobSpec jsonl_spec(const TempDir& d, const std::string& tokenizer) {
  testing_util::write_tiny_config(d / "config.json", 4096, 10000);
  JobSpec s = testing_util::spec_with_config(d / "config.json", 4);
  s.data.source = "jsonl";
  s.data.path = d / "sft.jsonl";
  std::ofstream(s.data.path) << kLines[0] << "\n" << kLines[1] << "\n";
  s.data.tokenizer = tokenizer;
  return s;
}

JobSpec on_shards(JobSpec s, const std::string& shards) {
  s.data.source = "shards";
  s.data.path = shards;
  s.data.tokenizer.clear();
  return s;
}

// A run continued from a checkpoint trained on one tokenizer's ids, now on shards another made.
TEST(JobStart, ShardsOfAnotherTokenizerDoNotContinueARun) {
  TempDir d("mt-start-shards");
  const std::string a = testing_util::gpt2_tokenizer_dir(d / "tok-a", false),
                    b = testing_util::gpt2_tokenizer_dir(d / "tok-b", true);
  write_shards(a, d / "shards-a");
  write_shards(b, d / "shards-b");
  ASSERT_TRUE(testing_util::run_stopped_at(jsonl_spec(d, a), d / "run", 2).ok());
  JobSpec continued = on_shards(jsonl_spec(d, a), d / "shards-b");
  continued.init.from = d / "run/checkpoints";
  auto refused = JobRunner(continued, d / "continued-b", {}).run();
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("the tokenizer that made data.path's shards does not tokenize as"),
            std::string::npos) << refused.status().to_string();
  continued.data.path = d / "shards-a";  // the same tokenizer's shards: it goes on
  auto same = JobRunner(continued, d / "continued-a", {}).run();
  EXPECT_TRUE(same.ok()) << same.status().to_string();
  EXPECT_EQ(*data_tokenizer_fingerprint(continued.data), *data_tokenizer_fingerprint(jsonl_spec(d, a).data));
}

// A held-out set in shards of another tokenizer than the training data's, either way round.
TEST(JobStart, AHeldOutSetInShardsOfAnotherTokenizerIsRefused) {
  TempDir d("mt-start-eval-shards");
  const std::string a = testing_util::gpt2_tokenizer_dir(d / "tok-a", false),
                    b = testing_util::gpt2_tokenizer_dir(d / "tok-b", true);
  write_shards(a, d / "shards-a");
  write_shards(b, d / "shards-b");
  JobSpec spec = jsonl_spec(d, a);
  spec.eval.enabled = true;
  spec.eval.data = on_shards(spec, d / "shards-b").data;
  EXPECT_NE(check_eval_tokenizer(spec).message().find("that made eval.data.path's shards does not tokenize as data.tokenizer"),
            std::string::npos) << check_eval_tokenizer(spec).to_string();
  spec.eval.data.path = d / "shards-a";
  EXPECT_TRUE(check_eval_tokenizer(spec).ok()) << check_eval_tokenizer(spec).to_string();
  JobSpec reversed = on_shards(spec, d / "shards-b");  // training on shards, held out in jsonl
  reversed.eval.data = jsonl_spec(d, a).data;
  EXPECT_EQ(check_eval_tokenizer(reversed).code(), StatusCode::kInvalidArgument);
  reversed.data.path = d / "shards-a";
  EXPECT_TRUE(check_eval_tokenizer(reversed).ok()) << check_eval_tokenizer(reversed).to_string();
}

}  // namespace
}  // namespace mt

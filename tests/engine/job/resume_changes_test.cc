// A run that goes on from a checkpoint after something behind the spec's paths changed (a
// defect hunt found each going on silently): the model's config.json edited, the tokenizer
// replaced, rows of another length; and a stop that lands during a long evaluation.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>

#include "engine/exec/resident_executor.h"
#include "engine/io/checkpoint.h"
#include "engine/job/held_out.h"
#include "engine/job/job.h"
#include "engine/job/job_start.h"
#include "engine/model/init.h"
#include "tests/engine/job/tiny_job.h"
#include "tests/engine/temp_dir.h"
#include "tests/test_paths.h"

namespace mt {
namespace {

using testing_util::TempDir;
using testing_util::tiny_spec;

using testing_util::spec_with_config;
using testing_util::write_tiny_config;

TEST(ResumeChanges, AModelConfigEditedBetweenRunsIsRefusedNamingTheKey) {
  TempDir d("mt-resume-cfg");
  const std::string cfg = d / "config.json";
  write_tiny_config(cfg, 256, 10000);
  ASSERT_TRUE(testing_util::run_stopped_at(spec_with_config(cfg, 4), d / "run", 2).ok());
  write_tiny_config(cfg, 256, 500000);
  auto refused = JobRunner(spec_with_config(cfg, 4), d / "run", {}).run();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("rope_theta"), std::string::npos) << refused.status().to_string();
  // As it was, re-saved otherwise (keys in another order, 10000.0 written 10000): the run goes on.
  write_tiny_config(cfg, 256, 10000);
  const Json was = *Json::parse(*read_file(cfg));
  Json::Object reversed(was.members().rbegin(), was.members().rend());
  Json resaved = Json::object(reversed);
  resaved.set("rope_theta", 10000);
  std::ofstream(cfg, std::ios::trunc) << resaved.dump(1);
  auto resumed = JobRunner(spec_with_config(cfg, 4), d / "run", {}).run();
  ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
  EXPECT_EQ(resumed->steps_done, 4);
}

// tokenizer.json replaced in place by one of the same vocabulary whose merges differ: the same
// path in the spec, other ids for the same text.
TEST(ResumeChanges, ATokenizerReplacedBetweenRunsIsRefused) {
  TempDir d("mt-resume-tok");
  const std::string fixture = testing_util::gpt2_tokenizer_json();
  const std::string tok = d / "tok/tokenizer.json", cfg = d / "config.json", data = d / "sft.jsonl";
  testing_util::gpt2_tokenizer_dir(d / "tok", false);
  write_tiny_config(cfg, 4096, 10000);
  {
    std::ofstream f(data);
    for (int i = 0; i < 32; ++i) f << R"({"prompt": "say the number )" << i << R"(", "completion": " it is )" << i << "\"}\n";
  }
  JobSpec spec = spec_with_config(cfg, 4);
  spec.data.source = "jsonl";
  spec.data.path = data;
  spec.data.tokenizer = d / "tok";
  auto first = testing_util::run_stopped_at(spec, d / "run", 2);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  std::ofstream(tok, std::ios::trunc) << testing_util::gpt2_tokenizer_reversed_merges();
  auto refused = JobRunner(spec, d / "run", {}).run();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("does not tokenize as"), std::string::npos) << refused.status().to_string();
  std::filesystem::copy_file(fixture, tok, std::filesystem::copy_options::overwrite_existing);
  auto resumed = JobRunner(spec, d / "run", {}).run();
  ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
  // Continued on data that names no tokenizer (synthetic ids): nothing to compare, it goes on.
  JobSpec other = spec_with_config(cfg, 6);
  other.init.from = d / "run/checkpoints";
  auto continued = JobRunner(other, d / "other", {}).run();
  ASSERT_TRUE(continued.ok()) << continued.status().to_string();
}

// The data position counts rows of seq_len tokens: init.from a run of other rows starts the data
// over (saying so) rather than skipping or repeating data.
TEST(ResumeChanges, InitFromARunOfOtherRowsReadsTheDataFromItsStart) {
  JobSpec spec = tiny_spec("resident", 20);
  spec.train.seq_len = 128;
  spec.init.from = "/runs/a";
  TrainerState st;
  st.step = 10;
  st.data_cursor = 80;
  st.spec = Json::object({{"seq_len", 64}});
  const DataStart other = data_start(spec, st, "", "synthetic");
  EXPECT_EQ(other.cursor, 0u);
  EXPECT_NE(other.warning.find("rows of 64 tokens"), std::string::npos) << other.warning;
  st.spec = Json::object({{"seq_len", 128}});
  st.data_source = "synthetic";
  const DataStart same = data_start(spec, st, "", "synthetic");
  EXPECT_EQ(same.cursor, 80u);
  EXPECT_TRUE(same.warning.empty()) << same.warning;
}

TEST(ResumeChanges, AStopDuringAnEvaluationEndsItBetweenBatches) {
  JobSpec spec = tiny_spec("resident", 1);
  spec.eval.enabled = true;
  spec.eval.data.source = "synthetic";
  spec.eval.max_tokens = 32 * 64;  // 64 rows: several batches
  const ModelConfig cfg = *resolve_model(spec);
  auto ex = ResidentExecutor::create(cfg, job_train_options(spec));
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  init_weights(cfg, (*ex)->store(), 1);
  auto set = HeldOutSet::open(spec, cfg.vocab_size, spec.train.micro_batch);
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  std::atomic<bool> stop{false};
  auto whole = set->evaluate(**ex, &stop);
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  EXPECT_GT(whole->counted, 0);
  stop = true;
  EXPECT_EQ(set->evaluate(**ex, &stop).status().code(), StatusCode::kCancelled);
}

// A stop at the last step cuts the final evaluation short (it did not end before the whole set
// was evaluated); the run that goes on makes it, though it has no step left to train.
TEST(ResumeChanges, AFinalEvaluationAStopCutShortIsMadeWhenTheRunGoesOn) {
  TempDir d("mt-resume-eval");
  JobSpec spec = tiny_spec("resident", 2);
  spec.eval.enabled = true;
  spec.eval.data.source = "synthetic";
  spec.eval.max_tokens = 32 * 64;
  JobHooks hooks;
  JobRunner* self = nullptr;
  hooks.on_step = [&](const StepStats& s) {
    if (s.step == 2) self->request_cancel();
  };
  std::vector<long> evaluated;
  hooks.on_eval = [&](const EvalReport& r) { evaluated.push_back(r.step); };
  JobRunner first(spec, d / "run", hooks);
  self = &first;
  auto cut = first.run();
  ASSERT_TRUE(cut.ok()) << cut.status().to_string();
  EXPECT_TRUE(cut->cancelled);
  EXPECT_TRUE(evaluated.empty());
  hooks.on_step = nullptr;
  auto goes_on = JobRunner(spec, d / "run", hooks).run();
  ASSERT_TRUE(goes_on.ok()) << goes_on.status().to_string();
  EXPECT_EQ(goes_on->steps_run, 0);
  EXPECT_EQ(evaluated, (std::vector<long>{2}));
  EXPECT_EQ(goes_on->eval.step, 2);
  // The step's checkpoint (written before the evaluation) takes it: its trainer_state says so, and
  // a run after that has nothing to make up.
  auto saved = read_trainer_state(goes_on->checkpoint);
  ASSERT_TRUE(saved.ok()) << saved.status().to_string();
  EXPECT_EQ(saved->eval.step, 2);
  EXPECT_EQ(saved->eval.best_step, 2);
  auto again = JobRunner(spec, d / "run", hooks).run();
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(evaluated, (std::vector<long>{2})) << "evaluated again";
}

// The CPU backend's device arena is host memory: the host figure (and its budget) counts it.
TEST(ResumeChanges, ACpuJobsPlanCountsItsDevicesInHostMemory) {
  for (int devices : {1, 2}) {
    JobSpec spec = tiny_spec("streaming", 1);
    spec.devices = devices;
    const ModelConfig cfg = *resolve_model(spec);
    auto cpu = plan_for_job(spec, cfg, 0, 0);
    ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
    uint64_t counted = 0, sum = 0;
    for (const auto& [kind, bytes] : cpu->host_by_kind) {
      if (kind == "cpu_devices") counted = bytes;
      sum += bytes;
    }
    EXPECT_EQ(counted, cpu->device_bytes * uint64_t(devices));
    EXPECT_EQ(cpu->host_bytes, sum);
    spec.backend = "cuda";
    auto gpu = plan_for_job(spec, cfg, 0, 0);
    ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
    for (const auto& [kind, bytes] : gpu->host_by_kind) EXPECT_NE(kind, "cpu_devices") << "a GPU's memory is its own";
  }
}

}  // namespace
}  // namespace mt

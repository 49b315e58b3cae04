// The small jobs the JobRunner and JobSpec tests run: a tiny model on synthetic data (or as a
// config.json of another vocabulary), the gpt2 fixture's tokenizer (or one that tokenizes
// otherwise), and a run stopped after a given step (a cancel at that step boundary, with its
// checkpoint).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/base/json.h"
#include "engine/job/job.h"
#include "engine/model/model_config.h"
#include "tests/test_paths.h"

namespace mt::testing_util {

// executor: resident, streaming, or "speculative" (streaming with speculative_updates: on).
inline JobSpec tiny_spec(const std::string& executor, long steps) {
  const bool speculative = executor == "speculative";
  auto j = Json::parse(R"({"name": "t", "model": {"preset": "tiny"}, "init": {"seed": 3},
      "data": {"source": "synthetic", "seed": 4}, "seq_len": 32, "micro_batch": 4, "global_batch": 8,
      "optimizer": {"lr": 0.003, "betas": [0.9, 0.95], "weight_decay": 0.1, "grad_clip": 1.0},
      "schedule": {"warmup_steps": 2, "decay": "cosine", "min_lr_ratio": 0.1},
      "checkpoint": {"every": 0, "keep": 2}, "executor": ")" + std::string(speculative ? "streaming" : executor) +
                       R"(", "speculative_updates": ")" + (speculative ? "on" : "off") + R"(", "steps": )" +
                       std::to_string(steps) + "}");
  EXPECT_TRUE(j.ok());
  auto s = job_spec_from_json(*j);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return *s;
}

// The gpt2 fixture's tokenizer.json, and the same with its merges in reverse order: the same
// vocabulary, other ids for the same text.
inline std::string gpt2_tokenizer_json() {
  return testing_util::fixture_source_dir() + "/tests/fixtures/tokenizers/gpt2/tokenizer.json";
}
inline std::string gpt2_tokenizer_reversed_merges() {
  auto j = Json::parse(*read_file(gpt2_tokenizer_json()));
  EXPECT_TRUE(j.ok());
  Json model = *j->find("model");
  Json::Array merges = model.find("merges")->items();
  std::reverse(merges.begin(), merges.end());
  model.set("merges", Json::array(merges));
  j->set("model", model);
  return j->dump();
}

// The gpt2 fixture's tokenizer as a model directory `dir` (EOS from its tokenizer_config.json),
// its merges reversed when `reversed`: the same vocabulary, other ids for the same text.
inline std::string gpt2_tokenizer_dir(const std::string& dir, bool reversed) {
  std::filesystem::create_directories(dir);
  if (reversed) std::ofstream(dir + "/tokenizer.json") << gpt2_tokenizer_reversed_merges();
  else std::filesystem::copy_file(gpt2_tokenizer_json(), dir + "/tokenizer.json");
  std::ofstream(dir + "/tokenizer_config.json") << R"({"eos_token": "<|endoftext|>"})";
  return dir;
}

// The tiny preset as a config.json at `path` of `vocab` tokens and RoPE base `theta`, and the
// tiny spec (resident) of `steps` steps naming it.
inline void write_tiny_config(const std::string& path, int vocab, double theta) {
  ModelConfig c = *preset_config("tiny");
  c.vocab_size = vocab;
  c.rope_theta = theta;
  c.raw = Json();
  std::ofstream(path) << model_config_to_json(c).dump(2);
}
inline JobSpec spec_with_config(const std::string& config, long steps) {
  JobSpec s = tiny_spec("resident", steps);
  s.model.preset.clear();
  s.model.hf_config = config;
  return s;
}

// A run of `spec` in `dir` that stops after step `step`, as a cancel there does.
inline Result<JobResult> run_stopped_at(const JobSpec& spec, const std::string& dir, long step) {
  JobRunner* runner = nullptr;
  JobHooks hooks;
  hooks.on_step = [&](const StepStats& s) {
    if (s.step == step) runner->request_cancel();
  };
  JobRunner run(spec, dir, hooks);
  runner = &run;
  return run.run();
}

}  // namespace mt::testing_util

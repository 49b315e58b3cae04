// The small jobs the JobRunner and JobSpec tests run: a tiny model on synthetic data, and a run
// stopped after a given step (a cancel at that step boundary, with its checkpoint).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "engine/base/json.h"
#include "engine/job/job.h"
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

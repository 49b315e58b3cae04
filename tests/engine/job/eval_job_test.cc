// Held-out evaluation in a job (spec.eval): the spec's strict reading, evaluations at their
// steps and at the end with the numbers an independent evaluation of the checkpoint gives, the
// same numbers after a resume, the curve in TensorBoard, and checkpoint.keep_best's retention.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "engine/exec/resident_executor.h"
#include "engine/io/checkpoint.h"
#include "engine/io/tensorboard.h"
#include "engine/job/held_out.h"
#include "engine/job/job.h"
#include "engine/job/job_data.h"
#include "tests/engine/job/spec_refusals.h"
#include "tests/engine/job/tiny_job.h"
#include "tests/engine/temp_dir.h"
#include "tests/test_paths.h"

namespace mt {
namespace {

namespace fs = std::filesystem;
using testing_util::TempDir;

// Trains on the synthetic chain of seed 4 (tokens 0..63); `eval_data` is the held-out set.
JobSpec eval_spec(long steps, long every, const std::string& eval_data = R"({"source": "synthetic", "seed": 9})",
                  const std::string& extra = "") {
  auto j = Json::parse(R"({"name": "e", "model": {"preset": "tiny"}, "init": {"seed": 3},
      "data": {"source": "synthetic", "seed": 4}, "seq_len": 32, "micro_batch": 4, "global_batch": 8,
      "optimizer": {"lr": 0.003, "grad_clip": 1.0}, "executor": "streaming",
      "eval": {"data": )" + eval_data + R"(, "every": )" + std::to_string(every) + R"(, "max_tokens": 640})" + extra +
                       R"(, "steps": )" + std::to_string(steps) + "}");
  EXPECT_TRUE(j.ok()) << j.status().to_string();
  auto s = job_spec_from_json(*j);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return *s;
}

std::map<long, EvalReport> run_job(const JobSpec& spec, const std::string& dir, long cancel_at = 0,
                                   Result<JobResult>* out = nullptr) {
  std::map<long, EvalReport> evals;
  JobHooks hooks;
  JobRunner* self = nullptr;
  hooks.on_eval = [&](const EvalReport& r) {
    EXPECT_EQ(evals.count(r.step), 0u) << "step " << r.step << " evaluated twice";
    evals[r.step] = r;
  };
  hooks.on_step = [&](const StepStats& s) {
    if (s.step == cancel_at) self->request_cancel();
  };
  JobRunner runner(spec, dir, hooks);
  self = &runner;
  auto r = runner.run();
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (out) *out = r;
  return evals;
}

TEST(EvalSpec, ReadsStrictlyRoundTripsAndStaysOutOfTheHash) {
  JobSpec a = eval_spec(4, 2);
  EXPECT_TRUE(a.eval.enabled);
  EXPECT_EQ(a.eval.every, 2);
  EXPECT_EQ(a.eval.max_tokens, 640);
  EXPECT_EQ(a.eval.data.seed, 9u);
  auto b = job_spec_from_json(job_spec_to_json(a));
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_TRUE(b->eval.enabled);
  EXPECT_EQ(b->eval.every, 2);
  EXPECT_EQ(b->eval.max_tokens, 640);
  EXPECT_EQ(b->eval.data.seed, 9u);
  JobSpec plain = a;
  plain.eval = EvalSpec{};
  EXPECT_EQ(job_spec_to_json(plain).find("eval"), nullptr);
  EXPECT_EQ(job_spec_hash(plain), job_spec_hash(a)) << "evaluation does not change the trajectory";
  JobSpec best = eval_spec(4, 2, R"({"source": "synthetic", "seed": 9})", R"(, "checkpoint": {"keep_best": true})");
  EXPECT_TRUE(best.checkpoint.keep_best);
  auto best2 = job_spec_from_json(job_spec_to_json(best));
  ASSERT_TRUE(best2.ok());
  EXPECT_TRUE(best2->checkpoint.keep_best);
  EXPECT_EQ(job_spec_hash(best), job_spec_hash(a));
}

TEST(EvalSpec, RefusalsNameTheField) {
  testing_util::expect_spec_refusals({
      {R"("eval": {"every": 2})", "eval.data"},
      {R"("eval": {"data": {"source": "push"}})", "eval.data.source"},
      {R"("eval": {"data": {"source": "jsonl"}})", "eval.data.path"},
      {R"("eval": {"data": {"source": "synthetic"}, "every": -1})", "eval.every"},
      {R"("eval": {"data": {"source": "synthetic"}, "max_tokens": 0})", "eval.max_tokens"},
      {R"("eval": {"data": {"source": "synthetic"}, "max_tokens": 67108865})", "eval.max_tokens"},
      {R"("eval": {"data": {"source": "synthetic"}, "evry": 2})", "eval.evry"},
      {R"("eval": {"data": {"source": "synthetic", "sede": 2}})", "eval.data.sede"},
      {R"("eval": {"data": {"source": "shards", "path": "x", "epochs": 2}})", "eval.data.epochs"},
      {R"("eval": 3)", "eval"},
      {R"("checkpoint": {"keep_best": true})", "keep_best"},
  });
}

// Every `every` steps and at the end (once, when the last step is not on the grid), with the
// numbers a resident evaluation of the final checkpoint gives bit for bit, and eval/loss in
// TensorBoard at those steps.
TEST(EvalJob, EvaluatesAtItsStepsAndAtTheEndWithTheCheckpointsNumbers) {
  TempDir dir;
  JobSpec spec = eval_spec(5, 2);
  spec.logging.tensorboard = true;
  Result<JobResult> result = JobResult{};
  const auto evals = run_job(spec, dir.path, 0, &result);
  ASSERT_TRUE(result.ok());
  ASSERT_EQ(evals.size(), 3u);
  EXPECT_EQ(evals.begin()->first, 2);
  EXPECT_EQ(std::next(evals.begin())->first, 4);
  EXPECT_EQ(evals.rbegin()->first, 5) << "the end of training, off the grid";
  EXPECT_EQ(evals.at(2).counted, 20 * 32) << "max_tokens 640: 20 rows of 32, every target counted";
  EXPECT_LT(evals.at(5).loss, evals.at(2).loss) << "the held-out chain is the training chain's kind";
  EXPECT_EQ(result->eval.step, 5);
  EXPECT_EQ(result->eval.loss, evals.at(5).loss);

  // Independently: the checkpoint at step 5 in a resident executor, over the same set.
  auto cfg = resolve_model(spec);
  ASSERT_TRUE(cfg.ok());
  TrainOptions opt = job_train_options(spec);
  auto res = ResidentExecutor::create(*cfg, opt);
  ASSERT_TRUE(res.ok());
  auto st = load_checkpoint(result->checkpoint, *cfg, (*res)->store());
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  EXPECT_EQ(st->eval.step, 5);
  EXPECT_EQ(st->eval.loss, evals.at(5).loss);
  auto set = HeldOutSet::open(spec, cfg->vocab_size, (*res)->eval_batch_rows());
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  auto again = set->evaluate(**res);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->loss(), evals.at(5).loss) << "streaming job = resident reference, bit for bit";

  auto f = read_tensorboard_file(dir / (std::string("tensorboard/") + kTensorBoardFile));
  ASSERT_TRUE(f.ok());
  std::map<long, double> curve;
  for (const TensorBoardEvent& e : f->events)
    for (const auto& [tag, v] : e.scalars)
      if (tag == "eval/loss") curve[e.step] = v;
  ASSERT_EQ(curve.size(), 3u);
  for (const auto& [step, r] : evals) EXPECT_EQ(curve[step], double(float(r.loss))) << "step " << step;
}

// A run cancelled (checkpointed) at step 3 and resumed evaluates at the same steps with the
// same numbers as the uninterrupted run, bit for bit.
TEST(EvalJob, ResumeGivesTheSameEvaluationsAtTheSameSteps) {
  TempDir whole, split;
  const JobSpec spec = eval_spec(6, 2);
  const auto want = run_job(spec, whole.path);
  auto first = run_job(spec, split.path, 3);
  EXPECT_EQ(first.size(), 1u) << "step 2 only: a cancel is not the end of training";
  const auto second = run_job(spec, split.path);
  first.insert(second.begin(), second.end());
  ASSERT_EQ(first.size(), want.size());
  for (const auto& [step, r] : want) {
    ASSERT_EQ(first.count(step), 1u) << "step " << step;
    EXPECT_EQ(first.at(step).loss, r.loss) << "step " << step;
    EXPECT_EQ(first.at(step).best, r.best) << "step " << step;
  }
}

std::vector<long> checkpoint_steps(const std::string& root) {
  std::vector<long> steps;
  auto list = list_checkpoints(root);
  EXPECT_TRUE(list.ok());
  for (const auto& c : *list) steps.push_back(c.step);
  return steps;
}

// Held-out tokens the training never shows (the chain's 256 tokens against training's 64):
// training on 0..63 raises their loss, so the best evaluation is an early one, and keep_best
// keeps its checkpoint besides the last `keep` (1) — and only it.
TEST(EvalJob, KeepBestKeepsTheLowestHeldOutLossBesidesTheLast) {
  TempDir dir;
  const JobSpec spec = eval_spec(8, 2, R"({"source": "synthetic", "seed": 9, "active_vocab": 256})",
                                 R"(, "checkpoint": {"keep": 1, "keep_best": true})");
  Result<JobResult> result = JobResult{};
  const auto evals = run_job(spec, dir.path, 0, &result);
  ASSERT_TRUE(result.ok());
  ASSERT_EQ(evals.size(), 4u);
  const auto best = std::min_element(evals.begin(), evals.end(),
                                     [](const auto& a, const auto& b) { return a.second.loss < b.second.loss; });
  ASSERT_NE(best->first, 8) << "the held-out loss must rise for this test to mean anything";
  double lowest = 1e300;  // a report is `best` when it is below every earlier one
  for (const auto& [step, r] : evals) {
    EXPECT_EQ(r.best, r.loss < lowest) << "step " << step;
    lowest = std::min(lowest, r.loss);
  }
  EXPECT_EQ(result->eval.best_step, best->first);
  EXPECT_EQ(checkpoint_steps(dir / "checkpoints"), (std::vector<long>{best->first, 8}));
  auto list = list_checkpoints(dir / "checkpoints");
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->front().best && list->front().evaluated);
  EXPECT_EQ(list->front().eval_loss, best->second.loss);
  EXPECT_FALSE(list->back().best);
  EXPECT_TRUE(list->back().latest && list->back().evaluated);
}

// The training chain held out: every evaluation improves, each is checkpointed as the new best,
// and the older best is pruned once it is neither the best nor among the last `keep`.
TEST(EvalJob, KeepBestFollowsAnImprovingCurve) {
  TempDir dir;
  const JobSpec spec = eval_spec(6, 2, R"({"source": "synthetic", "seed": 4})", R"(, "checkpoint": {"keep": 1, "keep_best": true})");
  const auto evals = run_job(spec, dir.path);
  ASSERT_EQ(evals.size(), 3u);
  for (const auto& [step, r] : evals) EXPECT_TRUE(r.best) << "step " << step;
  EXPECT_EQ(checkpoint_steps(dir / "checkpoints"), (std::vector<long>{6}));
}

// Held-out jsonl tokenized otherwise than the training jsonl measures its loss in other ids:
// refused when the job starts (before any memory is taken), naming both. Another tokenizer, the
// same vocabulary with its merges in another order, and the same tokenizer.json in a model
// directory whose EOS differs (base against instruct) are other tokenizations; the same
// tokenizer by another path (its directory, a copy of its tokenizer.json) is the same.
TEST(EvalJob, AHeldOutJsonlTokenizedOtherwiseIsRefusedAtStart) {
  TempDir d("mt-eval-tok");
  const std::string fixtures = testing_util::fixture_source_dir() + "/tests/fixtures/tokenizers/";
  fs::copy_file(fixtures + "gpt2/tokenizer.json", d / "copy.json");
  std::ofstream(d / "reversed.json") << testing_util::gpt2_tokenizer_reversed_merges();
  for (const char* dir : {"base", "instruct"}) {
    fs::create_directories(d / dir);
    fs::copy_file(fixtures + "gpt2/tokenizer.json", d / (std::string(dir) + "/tokenizer.json"));
  }
  std::ofstream(d / "base/tokenizer_config.json") << R"({"eos_token": "<|endoftext|>"})";
  std::ofstream(d / "instruct/tokenizer_config.json") << R"({"eos_token": "the"})";

  JobSpec spec = eval_spec(2, 1);
  spec.data.source = spec.eval.data.source = "jsonl";
  spec.data.path = spec.eval.data.path = d / "absent.jsonl";  // the tokenizers are compared first
  spec.data.tokenizer = fixtures + "gpt2";
  for (const std::string& same : {fixtures + "gpt2", fixtures + "gpt2/tokenizer.json", d / "copy.json"}) {
    spec.eval.data.tokenizer = same;
    EXPECT_TRUE(check_eval_tokenizer(spec).ok()) << same << ": " << check_eval_tokenizer(spec).to_string();
  }
  for (const std::string& other : {fixtures + "qwen2", d / "reversed.json", std::string("byte")}) {
    spec.eval.data.tokenizer = other;
    const Status s = check_eval_tokenizer(spec);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << other << ": " << s.to_string();
    EXPECT_NE(s.message().find("does not tokenize as data.tokenizer"), std::string::npos) << s.to_string();
  }
  spec.data.tokenizer = d / "base";
  spec.eval.data.tokenizer = d / "instruct";
  EXPECT_NE(check_eval_tokenizer(spec).message().find("EOS 'the'"), std::string::npos)
      << check_eval_tokenizer(spec).to_string();
  TempDir run("mt-eval-tok-run");
  auto started = JobRunner(spec, run.path, {}).run();
  ASSERT_FALSE(started.ok());
  EXPECT_NE(started.status().message().find("does not tokenize as"), std::string::npos) << started.status().to_string();
  spec.eval.data.tokenizer = d / "absent-tokenizer.json";
  EXPECT_NE(check_eval_tokenizer(spec).message().find("eval.data.tokenizer"), std::string::npos)
      << check_eval_tokenizer(spec).to_string();
  spec.eval.data.source = "tokens";  // names no tokenizer: not compared
  EXPECT_TRUE(check_eval_tokenizer(spec).ok());
}

// The held-out set's host bytes are in the job's plan.
TEST(EvalJob, ThePlanCountsTheHeldOutSet) {
  const JobSpec spec = eval_spec(2, 1);
  auto cfg = resolve_model(spec);
  ASSERT_TRUE(cfg.ok());
  auto plan = plan_for_job(spec, *cfg, 0, 0);
  ASSERT_TRUE(plan.ok());
  uint64_t eval_bytes = 0;
  for (const auto& [k, b] : plan->host_by_kind)
    if (k == "eval_set") eval_bytes = b;
  EXPECT_EQ(eval_bytes, uint64_t(20 * 32 * 12)) << "640 slots, inputs + targets + positions";
  JobSpec plain = spec;
  plain.eval = EvalSpec{};
  auto p2 = plan_for_job(plain, *cfg, 0, 0);
  ASSERT_TRUE(p2.ok());
  EXPECT_EQ(plan->host_bytes, p2->host_bytes + eval_bytes);
  EXPECT_EQ(plan->device_bytes, p2->device_bytes) << "evaluation runs in the step's own device buffers";
}

}  // namespace
}  // namespace mt

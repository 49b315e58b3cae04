// Held-out evaluation through the CLI, in separate processes: `megatrain train` reports the
// held-out loss at exactly its steps and the end, equal to `megatrain eval` of each step's
// checkpoint on the same data; a tiny model overfitting a small set shows the training loss
// falling while the held-out loss rises, and keep_best keeps the checkpoint of the lowest.
#include <algorithm>
#include <random>
#include <set>

#include "tests/cli/cli_fixture.h"

namespace mt::cli::testing {
namespace {

// `bytes` letters drawn uniformly from a..p: nothing to learn but their frequencies.
std::string letters(const std::string& path, size_t bytes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string text;
  for (size_t i = 0; i < bytes; ++i) text += char('a' + rng() % 16);
  return write_file(path, text);
}

std::string eval_spec(const std::string& train, const std::string& held_out, long steps, long every,
                      const std::string& checkpoint) {
  return "name: eval-test\n"
         "model: {preset: tiny}\n"
         "init: {seed: 1}\n"
         "data: {source: text, path: " + train + "}\n"
         "seq_len: 32\nmicro_batch: 4\nglobal_batch: 8\n"
         "steps: " + std::to_string(steps) + "\n"
         "optimizer: {lr: 3.0e-3, weight_decay: 0.0, grad_clip: 1.0}\n"
         "schedule: {warmup_steps: 5, decay: constant}\n"
         "checkpoint: " + checkpoint + "\n"
         "eval: {data: {source: text, path: " + held_out + "}, every: " + std::to_string(every) + ", max_tokens: 640}\n"
         "backend: cpu\n";
}

Json last_json(const RunResult& r) {
  auto lines = r.json_lines();
  return lines.empty() ? Json::object() : lines.back();
}

// `megatrain eval` of the checkpoint of `step` under RUN over the first 20 rows of `data`.
double eval_checkpoint(const std::string& run, long step, const std::string& data) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08ld", step);
  RunResult e = megatrain({"eval", "--model", run + "/checkpoints/" + name, "--data", data, "--format", "text",
                           "--seq-len", "32", "--max-seqs", "20", "--json"});
  EXPECT_EQ(e.rc, 0) << describe(e);
  const Json* loss = last_json(e).find("loss");
  return loss ? loss->as_double() : -1;
}

struct Curves {
  std::map<long, double> train, held_out;
  std::map<long, bool> best;
  Json summary;
};

Curves curves_of(const RunResult& r) {
  Curves c;
  for (const Json& j : r.json_lines()) {
    const std::string event = j.find("event") ? j.find("event")->as_string() : "";
    if (event == "step") c.train[long(j.find("step")->as_int())] = j.find("loss")->as_double();
    if (event == "eval") {
      const long step = long(j.find("step")->as_int());
      EXPECT_EQ(c.held_out.count(step), 0u) << "step " << step << " evaluated twice";
      c.held_out[step] = j.find("eval_loss")->as_double();
      c.best[step] = j.find("best")->as_bool();
    }
    if (event == "summary") c.summary = j;
  }
  return c;
}

// `megatrain train --json` into DIR/run, on `train_rows` rows of 32 letters, holding out
// `held_rows` rows of others (DIR/held.txt).
struct EvalRun {
  std::string dir, held;
  RunResult result;
};
EvalRun train_with_eval(const std::string& name, int train_rows, int held_rows, long steps, long every,
                        const std::string& checkpoint) {
  EvalRun run{fresh_dir(name), "", {}};
  const std::string train = letters(run.dir + "/train.txt", size_t(train_rows) * 32 + 1, 1);
  run.held = letters(run.dir + "/held.txt", size_t(held_rows) * 32 + 1, 2);
  write_file(run.dir + "/spec.yaml", eval_spec(train, run.held, steps, every, checkpoint));
  run.result = megatrain({"train", run.dir + "/spec.yaml", "--out", run.dir + "/run", "--json"});
  return run;
}

TEST(EvalCli, HeldOutLossAtItsStepsEqualsMegatrainEvalOfThatCheckpoint) {
  const EvalRun run = train_with_eval("eval_steps", 64, 24, 7, 3, "{every: 3, keep: 10}");
  const RunResult& r = run.result;
  const std::string &dir = run.dir, &held = run.held;
  ASSERT_EQ(r.rc, 0) << describe(r);
  const Curves c = curves_of(r);
  ASSERT_EQ(c.held_out.size(), 3u) << describe(r);
  EXPECT_EQ(c.held_out.begin()->first, 3);
  EXPECT_EQ(std::next(c.held_out.begin())->first, 6);
  EXPECT_EQ(c.held_out.rbegin()->first, 7) << "and at the end";
  EXPECT_EQ(c.summary.find("eval_step")->as_int(), 7);
  for (const auto& [step, loss] : c.held_out)
    EXPECT_NEAR(loss, eval_checkpoint(dir + "/run", step, held), 1e-6) << "step " << step;
}

TEST(EvalCli, OverfittingShowsAndKeepBestKeepsTheLowestHeldOutLoss) {
  // One batch of training data, seen every step: memorised; the held-out letters only share
  // their frequencies with it.
  const EvalRun run = train_with_eval("eval_overfit", 8, 20, 60, 5, "{every: 0, keep: 1, keep_best: true}");
  const RunResult& r = run.result;
  const std::string &dir = run.dir, &held = run.held;
  ASSERT_EQ(r.rc, 0) << describe(r);
  const Curves c = curves_of(r);
  ASSERT_EQ(c.held_out.size(), 12u);
  EXPECT_LT(c.train.rbegin()->second, 0.5 * c.train.at(5)) << "the training set is memorised";
  const auto best = std::min_element(c.held_out.begin(), c.held_out.end(),
                                     [](const auto& a, const auto& b) { return a.second < b.second; });
  EXPECT_GT(c.held_out.rbegin()->second, best->second + 1.0) << "the held-out loss rises once the model memorises";
  EXPECT_LT(best->first, 60);
  EXPECT_TRUE(c.best.at(best->first));
  EXPECT_EQ(c.summary.find("best_eval_step")->as_int(), best->first);
  char name[32];
  std::snprintf(name, sizeof name, "step-%08ld", best->first);
  std::set<std::string> kept;
  for (const auto& e : fs::directory_iterator(dir + "/run/checkpoints"))
    if (e.is_directory()) kept.insert(e.path().filename().string());
  EXPECT_EQ(kept, (std::set<std::string>{name, "step-00000060"})) << "the best held-out besides the last (keep: 1)";
  EXPECT_NEAR(eval_checkpoint(dir + "/run", best->first, held), best->second, 1e-6) << "the kept checkpoint is that evaluation's";
}

}  // namespace
}  // namespace mt::cli::testing

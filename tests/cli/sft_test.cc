// Supervised fine-tuning data end to end, in separate processes: `megatrain tokenize` on a jsonl
// (exit code, --json fields, shards readable), a tiny model learning a synthetic instruction
// task from a jsonl spec, and resume in the middle of a packed epoch after kill -9, bit-exact.
#include <random>

#include "engine/data/example_set.h"
#include "engine/data/jsonl_examples.h"
#include "engine/data/shard_set.h"
#include "engine/text/tokenizer.h"
#include "engine/job/job.h"
#include "tests/cli/cli_fixture.h"
#include "tests/test_paths.h"

namespace mt::cli::testing {
namespace {

// "reverse: abc\n" -> "cba": n examples of 1..max_len letters from `letters`.
struct Task {
  std::string path, prompts, completions;
  size_t lines = 0;
};

Task reverse_task(const std::string& dir, size_t n, int max_len, int letters, uint32_t seed = 1) {
  Task t;
  t.path = dir + "/sft.jsonl";
  std::string text;
  std::mt19937 rng(seed);
  for (size_t i = 0; i < n; ++i) {
    std::string s;
    for (int k = 0, len = 1 + int(rng() % uint32_t(max_len)); k < len; ++k) s += char('a' + rng() % uint32_t(letters));
    const std::string p = "reverse: " + s + "\n", c(s.rbegin(), s.rend());
    text += Json::object({{"prompt", p}, {"completion", c}}).dump() + "\n";
    t.prompts += p;
    t.completions += c;
    ++t.lines;
  }
  write_file(t.path, text);
  return t;
}

std::string sft_spec(const std::string& data, long steps, int seq_len, int global_batch, long every) {
  return "name: sft-test\n"
         "model: {preset: tiny}\n"
         "init: {seed: 1}\n"
         "data: " + data + "\n"
         "seq_len: " + std::to_string(seq_len) + "\n"
         "micro_batch: " + std::to_string(global_batch / 2) + "\n"
         "global_batch: " + std::to_string(global_batch) + "\n"
         "steps: " + std::to_string(steps) + "\n"
         "optimizer: {lr: 3.0e-3, betas: [0.9, 0.95], weight_decay: 0.0, grad_clip: 1.0}\n"
         "schedule: {warmup_steps: 10, decay: cosine, min_lr_ratio: 0.1}\n"
         "checkpoint: {every: " + std::to_string(every) + ", keep: 10}\n"
         "backend: cpu\n";
}

Json last_line(const RunResult& r) {
  auto lines = r.json_lines();
  return lines.empty() ? Json::object() : lines.back();
}

TEST(SftCli, TokenizeJsonlWritesReadableShards) {
  const std::string dir = fresh_dir("sft_tokenize");
  const Task task = reverse_task(dir, 400, 8, 6);
  RunResult r = megatrain({"tokenize", task.path, "--tokenizer", "byte", "--out", dir + "/shards", "--threads", "2",
                           "--shard-tokens", "2000", "--json"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  const Json s = last_line(r);
  ASSERT_TRUE(s.find("documents") && s.find("tokens") && s.find("trained_tokens") && s.find("tokens_per_second"))
      << s.dump();
  EXPECT_EQ(s.find("documents")->as_int(), int64_t(task.lines));
  EXPECT_EQ(s.find("tokens")->as_int(), int64_t(task.prompts.size() + task.completions.size()));
  EXPECT_EQ(s.find("trained_tokens")->as_int(), int64_t(task.completions.size()));
  EXPECT_GT(s.find("shards")->as_int(), 1) << "--shard-tokens 2000 splits the output";
  EXPECT_NE(r.err.find("tok/s"), std::string::npos) << "a progress line on stderr: " << r.err;
  // The shards read back as the jsonl's examples, in order: prompt bytes (mask 0), completion (1).
  auto set = open_shard_example_set(dir + "/shards", 256);
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  ASSERT_EQ((*set)->size(), task.lines);
  std::string prompts, completions;
  for (uint64_t i = 0; i < (*set)->size(); ++i) {
    const uint64_t n = (*set)->length(i);
    std::vector<int32_t> ids(n);
    std::vector<uint8_t> loss(n);
    ASSERT_TRUE((*set)->read(i, 0, n, ids.data(), loss.data()).ok());
    for (uint64_t k = 0; k < n; ++k) (loss[k] ? completions : prompts) += char(ids[k]);
  }
  EXPECT_EQ(prompts, task.prompts);
  EXPECT_EQ(completions, task.completions);
  // A second run into the same directory is refused; a bad line is named.
  RunResult again = megatrain({"tokenize", task.path, "--tokenizer", "byte", "--out", dir + "/shards"});
  EXPECT_EQ(again.rc, 2) << describe(again);
  write_file(dir + "/bad.jsonl", "{\"prompt\": \"a\", \"completion\": \"b\"}\n{\"prompt\": [1]}\n");
  RunResult bad = megatrain({"tokenize", dir + "/bad.jsonl", "--tokenizer", "byte", "--out", dir + "/bad"});
  EXPECT_EQ(bad.rc, 1) << describe(bad);
  EXPECT_NE(bad.err.find("bad.jsonl:2"), std::string::npos) << describe(bad);
  if (!HasFailure()) fs::remove_all(dir);
}

// A tokenize run that fails after writing some shards (a bad line in its second input, as an
// interrupted one would) leaves no manifest, so training on its directory is refused by name.
// Before, its shards looked complete and a job trained on part of the corpus and exited 0.
TEST(SftCli, ShardsOfATokenizeThatDidNotFinishAreRefused) {
  const std::string dir = fresh_dir("sft_tokenize_partial");
  const Task task = reverse_task(dir, 400, 8, 6);
  write_file(dir + "/bad.jsonl", "{\"prompt\": [1]}\n");
  RunResult r = megatrain({"tokenize", task.path, dir + "/bad.jsonl", "--tokenizer", "byte", "--out", dir + "/shards",
                           "--shard-tokens", "500"});
  ASSERT_EQ(r.rc, 1) << describe(r);
  ASSERT_TRUE(fs::exists(dir + "/shards/shard-00000.mts")) << "shards were written before the bad line";
  EXPECT_FALSE(fs::exists(dir + "/shards/manifest.json"));
  const std::string spec =
      write_file(dir + "/spec.yaml", sft_spec("{source: shards, path: " + dir + "/shards}", 2, 32, 4, 0));
  RunResult t = megatrain({"train", spec, "--out", dir + "/run"});
  EXPECT_NE(t.rc, 0) << describe(t);
  EXPECT_NE(t.err.find("no manifest.json"), std::string::npos) << describe(t);
  const bool none = !fs::exists(dir + "/run/checkpoints") || fs::is_empty(dir + "/run/checkpoints");
  EXPECT_TRUE(none) << "no step was trained: " << describe(t);
  if (!HasFailure()) fs::remove_all(dir);
}

// With a real tokenizer (the committed Qwen2 fixture, byte-level BPE) and the chatml template,
// `megatrain tokenize` trains on exactly each assistant turn's content and its <|im_end|>.
TEST(SftCli, TokenizeChatsWithAHuggingFaceTokenizer) {
  const std::string dir = fresh_dir("sft_chat");
  const std::string tok = std::string(mt::testing_util::source_dir()) + "/tests/fixtures/tokenizers/qwen2/tokenizer.json";
  std::string lines;
  for (int i = 0; i < 50; ++i)
    lines += Json::object({{"messages", Json::array({Json::object({{"role", "user"}, {"content", "question " + std::to_string(i)}}),
                                                     Json::object({{"role", "assistant"}, {"content", "answer number " + std::to_string(i)}})})}})
                 .dump() + "\n";
  write_file(dir + "/chat.jsonl", lines);
  RunResult r = megatrain({"tokenize", dir + "/chat.jsonl", "--tokenizer", tok, "--chat-template", "chatml", "--out",
                           dir + "/shards", "--json"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  EXPECT_EQ(last_line(r).find("documents")->as_int(), 50);
  auto tokenizer = load_tokenizer(tok);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().to_string();
  auto set = open_shard_example_set(dir + "/shards", (*tokenizer)->vocab_size());
  ASSERT_TRUE(set.ok()) << set.status().to_string();
  ASSERT_EQ((*set)->size(), 50u);
  for (uint64_t i = 0; i < 50; ++i) {
    const uint64_t n = (*set)->length(i);
    std::vector<int32_t> ids(n), trained;
    std::vector<uint8_t> loss(n);
    ASSERT_TRUE((*set)->read(i, 0, n, ids.data(), loss.data()).ok());
    for (uint64_t k = 0; k < n; ++k)
      if (loss[k]) trained.push_back(ids[k]);
    std::string text;
    ASSERT_TRUE((*tokenizer)->decode(trained.data(), trained.size(), text).ok());
    EXPECT_EQ(text, "answer number " + std::to_string(i) + "<|im_end|>") << "example " << i;
  }
  // The manifest records what tokenized them, as a run on the same jsonl would fingerprint it.
  auto shared = open_tokenizer(tok);
  auto format = make_line_format(*shared, tok, "auto", "chatml");
  ASSERT_TRUE(format.ok()) << format.status().to_string();
  EXPECT_EQ(shard_set_tokenizer(dir + "/shards").tokenization, *tokenization_fingerprint(**shared, *format));
  EXPECT_EQ(shard_set_tokenizer(dir + "/shards").name, tok);
  if (!HasFailure()) fs::remove_all(dir);
}

// The tiny preset learns to reverse up to 4 letters of 4: the loss (completion tokens only, as
// SftJsonl.* checks exactly) starts near ln 256 = 5.5 and must fall below 0.6 nats/token, well
// under the 1.39 of guessing among the 4 letters.
TEST(SftCli, TinyModelLearnsReversalLossOnlyOnCompletions) {
  const std::string dir = fresh_dir("sft_learn");
  const Task task = reverse_task(dir, 2000, 4, 4);
  const std::string spec = write_file(
      dir + "/spec.yaml",
      sft_spec("{source: jsonl, path: " + task.path + ", tokenizer: byte, format: prompt_completion}", 100, 64, 16, 0));
  RunResult r = megatrain({"train", spec, "--json", "--out", dir + "/run"}, {}, 600);
  ASSERT_EQ(r.rc, 0) << describe(r);
  const auto lines = r.json_lines();
  ASSERT_GE(lines.size(), 100u);
  const double first = lines.front().find("loss")->as_double();
  const Json s = last_line(r);
  const double final_loss = s.find("final_loss")->as_double();
  EXPECT_GT(first, 4.5);
  EXPECT_LT(final_loss, 0.6) << describe(r);
  ASSERT_TRUE(s.find("packing_efficiency")) << s.dump();
  EXPECT_GT(s.find("packing_efficiency")->as_double(), 0.9);
  EXPECT_LE(s.find("packing_efficiency")->as_double(), 1.0);
  if (!HasFailure()) fs::remove_all(dir);
}

// data.epochs that end the run long before `steps`: the schedule spans `steps`, so the run would
// stop near its peak learning rate. Said at the start, with the steps the data gives; not when
// the data lasts, and not for a constant schedule.
TEST(SftCli, EpochsEndingTheRunBeforeItsStepsSayTheScheduleWillNotDecay) {
  const std::string dir = fresh_dir("sft_epochs_short");
  const Task task = reverse_task(dir, 48, 4, 4);  // 48 short examples: one 64-token row holds several
  auto run = [&](int epochs, const std::string& decay, int warmup = 0) {
    std::string yaml = sft_spec("{source: jsonl, path: " + task.path + ", tokenizer: byte, format: prompt_completion, "
                                "packing: false, epochs: " + std::to_string(epochs) + "}", 100, 64, 16, 0);
    yaml.replace(yaml.find("warmup_steps: 10, decay: cosine"), 31,
                 "warmup_steps: " + std::to_string(warmup) + ", decay: " + decay);
    return megatrain({"train", write_file(dir + "/spec.yaml", yaml), "--json", "--out",
                      dir + "/run-" + decay + std::to_string(epochs) + "-" + std::to_string(warmup)});
  };
  RunResult short_run = run(2, "cosine");  // 48 rows an epoch, 16 a step: 6 steps of 100
  ASSERT_EQ(short_run.rc, 0) << describe(short_run);
  EXPECT_NE(short_run.err.find("data.epochs 2 ends the run after about 6 steps, before steps = 100"), std::string::npos)
      << describe(short_run);
  EXPECT_NE(short_run.err.find("undecayed; set steps to about 6 to decay over the data"), std::string::npos)
      << describe(short_run);
  RunResult warming = run(2, "cosine", 10);  // the run ends inside its warmup
  EXPECT_NE(warming.err.find("still in its warmup of 10 steps; set steps and warmup_steps to fit about 6 steps"),
            std::string::npos) << describe(warming);
  RunResult constant = run(2, "constant");
  EXPECT_EQ(constant.err.find("ends the run after about"), std::string::npos) << describe(constant);
  RunResult lasting = run(40, "cosine");  // 120 steps of data
  EXPECT_EQ(lasting.err.find("ends the run after about"), std::string::npos) << describe(lasting);
  if (!HasFailure()) fs::remove_all(dir);
}

// The daemon runs a jsonl job from its data root; `megatrain status` shows the packing efficiency.
TEST(SftCli, StatusShowsPackingEfficiencyOfADaemonJob) {
  DaemonProcess daemon("sft_status");
  ASSERT_TRUE(daemon.ok());
  fs::create_directories(daemon.data_root());
  reverse_task(daemon.data_root(), 200, 8, 6);  // data_root/sft.jsonl
  const std::string dir = fresh_dir("sft_status_files");
  const std::string spec = write_file(
      dir + "/spec.yaml", sft_spec("{source: jsonl, path: sft.jsonl, tokenizer: byte, packing: true}", 4, 32, 4, 0));
  RunResult sub = daemon.cli({"submit", spec});
  ASSERT_EQ(sub.rc, 0) << describe(sub) << daemon.log();
  const std::string id = sub.out.substr(0, sub.out.find('\n'));
  RunResult watch = daemon.cli({"watch", id});  // until the job ends
  ASSERT_EQ(watch.rc, 0) << describe(watch) << daemon.log();
  RunResult human = daemon.cli({"status", id});
  ASSERT_EQ(human.rc, 0) << describe(human);
  EXPECT_NE(human.out.find("% of slots are real tokens"), std::string::npos) << human.out;
  RunResult json = daemon.cli({"status", id, "--json"});
  ASSERT_EQ(json.rc, 0) << describe(json);
  const Json j = last_line(json);
  ASSERT_TRUE(j.find("packing_efficiency")) << j.dump();
  EXPECT_GT(j.find("packing_efficiency")->as_double(), 0.5);
  EXPECT_LE(j.find("packing_efficiency")->as_double(), 1.0);
  RunResult summary = daemon.cli({"watch", id, "--json"});  // the summary, as `megatrain train`'s has it
  ASSERT_EQ(summary.rc, 0) << describe(summary);
  const Json sj = last_line(summary);
  ASSERT_TRUE(sj.find("packing_efficiency")) << sj.dump();
  EXPECT_EQ(sj.find("packing_efficiency")->as_double(), j.find("packing_efficiency")->as_double());
  if (!HasFailure()) fs::remove_all(dir);
}

// `megatrain train` killed with SIGKILL after a mid-epoch checkpoint, then run again, ends with
// the same loss and the same weights and optimizer state, byte for byte, as an uninterrupted run.
TEST(SftCli, ResumeMidEpochWithPackingIsBitExactAfterKill9) {
  const std::string dir = fresh_dir("sft_resume");
  const Task task = reverse_task(dir, 80, 8, 6);
  const std::string data = "{source: jsonl, path: " + task.path + ", tokenizer: byte, seed: 5}";
  const long steps = 40;  // past the epoch after the latest checkpoint a kill within a page of step lines can leave
  const std::string spec = write_file(dir + "/spec.yaml", sft_spec(data, steps, 32, 4, 3));
  RunResult whole = megatrain({"train", spec, "--json", "--out", dir + "/whole"}, {}, 300);
  ASSERT_EQ(whole.rc, 0) << describe(whole);

  const KilledRun killed = train_and_kill(spec, dir + "/killed", 11);  // past the checkpoints of 3, 6, 9
  ASSERT_GT(killed.step, 0) << "the run ended before it was killed:\n" << killed.seen;
  ASSERT_LT(killed.step, steps);

  // It resumes from a checkpoint in the middle of an epoch.
  std::string ckpt;
  for (const auto& e : fs::directory_iterator(dir + "/killed/checkpoints"))
    if (e.path().filename().string().rfind("step-", 0) == 0) ckpt = std::max(ckpt, e.path().string());
  ASSERT_FALSE(ckpt.empty());
  auto state = Json::parse(*read_file(ckpt + "/trainer_state.json"));
  ASSERT_TRUE(state.ok());
  const int64_t cursor = state->find("data_cursor")->as_int();
  auto job = job_spec_from_json(Json::object({{"model", Json::object({{"preset", "tiny"}})},
                                              {"data", Json::object({{"source", "jsonl"}, {"path", task.path},
                                                                     {"tokenizer", "byte"}, {"seed", 5}})}}));
  ASSERT_TRUE(job.ok()) << job.status().to_string();
  auto src = make_data_source(*job, 256);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  const int64_t rows = int64_t((*src)->num_sequences(32));
  EXPECT_GT(cursor % rows, 0) << "checkpoint at row " << cursor << " of epochs of " << rows << " rows";
  EXPECT_GT(steps * 4, rows + cursor) << "after resuming, the run crosses into the next epoch";

  RunResult resumed = megatrain({"train", spec, "--json", "--out", dir + "/killed"}, {}, 300);
  ASSERT_EQ(resumed.rc, 0) << describe(resumed);
  EXPECT_EQ(last_line(resumed).find("final_loss")->dump(), last_line(whole).find("final_loss")->dump());
  char name[32];
  std::snprintf(name, sizeof name, "step-%08ld", steps);
  for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
    auto a = read_file(dir + "/whole/checkpoints/" + name + "/" + f);
    auto b = read_file(dir + "/killed/checkpoints/" + name + "/" + f);
    ASSERT_TRUE(a.ok() && b.ok()) << f;
    EXPECT_TRUE(*a == *b) << f << " differs after resume";
  }
  if (!HasFailure()) fs::remove_all(dir);
}

// A checkpoint written before the data's description named its tokenizer resumes without the
// warning that its data changed: only fields appended inside the parenthesis differ.
TEST(SftCli, ACheckpointFromBeforeTheTokenizerWasDescribedResumesWithoutAWarning) {
  const std::string dir = fresh_dir("sft_old_description");
  const Task task = reverse_task(dir, 200, 4, 4);
  const std::string spec = write_file(
      dir + "/spec.yaml", sft_spec("{source: jsonl, path: " + task.path + ", tokenizer: byte}", 2, 32, 4, 0));
  RunResult first = megatrain({"train", spec, "--json", "--out", dir + "/run"});
  ASSERT_EQ(first.rc, 0) << describe(first);
  int rewritten = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir + "/run")) {
    if (e.path().filename() != "trainer_state.json") continue;
    std::string text = *read_file(e.path().string());
    const std::string field = ", tokenizer byte-level (token = byte)";
    const size_t at = text.find(field);
    ASSERT_NE(at, std::string::npos) << text;
    text.erase(at, field.size());  // "jsonl '...' (200 examples, 256 tokens), ...", as before
    write_file(e.path().string(), text);
    ++rewritten;
  }
  ASSERT_GT(rewritten, 0);
  RunResult again = megatrain({"train", spec, "--json", "--out", dir + "/run"});
  ASSERT_EQ(again.rc, 0) << describe(again);
  EXPECT_EQ(again.err.find("the data is not what"), std::string::npos) << describe(again);
  if (!HasFailure()) fs::remove_all(dir);
}

}  // namespace
}  // namespace mt::cli::testing

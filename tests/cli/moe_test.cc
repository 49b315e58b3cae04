// Mixtures of experts through the CLI, as a user runs them: `megatrain train` of a model whose
// steps leave experts idle, killed with SIGKILL after a checkpoint and run again, ends with the
// same weights, optimizer state and per-expert update counts, byte for byte, as an uninterrupted
// run; `megatrain plan` of the real shapes on one H200; the export of a trained gpt-oss as
// transformers' stacked experts.
#include <algorithm>
#include <csignal>

#include "tests/cli/cli_fixture.h"

namespace mt::cli::testing {
namespace {

// 16 experts, one a token, 8 tokens a step: most experts idle on any step, each on some.
constexpr const char* kSparseConfig = R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 32,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 64,
  "intermediate_size": 48, "num_experts": 16, "num_experts_per_tok": 1, "moe_intermediate_size": 16,
  "output_router_logits": true, "router_aux_loss_coef": 0.05})";

std::string moe_spec(const std::string& config, long steps) {
  return "name: moe-cli\n"
         "model: {hf_config: " + config + "}\n"
         "init: {seed: 3}\n"
         "data: {source: synthetic, seed: 2}\n"
         "seq_len: 4\n"
         "micro_batch: 1\n"
         "global_batch: 2\n"
         "steps: " + std::to_string(steps) + "\n"
         "optimizer: {lr: 1.0e-2, grad_clip: 0.5}\n"
         "checkpoint: {every: 2, keep: 5}\n"
         "backend: cpu\n";
}

std::string step_dir(const std::string& run, long step) {
  char name[32];
  std::snprintf(name, sizeof name, "/checkpoints/step-%08ld", step);
  return run + name;
}

// The step events of `lines`, each checked to carry the load-balancing loss and the experts it
// routed, of 2 layers x 16; the fewest experts any step routed is in `routed_min`.
std::vector<Json> moe_step_events(const std::vector<Json>& lines, long& routed_min) {
  std::vector<Json> steps;
  routed_min = 32;
  for (const Json& line : lines) {
    if (!line.find("event") || line.find("event")->as_string() != "step") continue;
    steps.push_back(line);
    if (!line.find("aux_loss") || !line.find("experts_routed") || !line.find("experts_total")) {
      ADD_FAILURE() << "a step event without the MoE fields: " << line.dump();
      continue;
    }
    EXPECT_GT(line.find("aux_loss")->as_double(), 0) << line.dump();
    EXPECT_EQ(line.find("experts_total")->as_int(), 32) << line.dump();
    routed_min = std::min<long>(routed_min, long(line.find("experts_routed")->as_int()));
  }
  return steps;
}

// Through the daemon: WatchJob's step events and the job's status carry the load-balancing loss
// and the experts routed, as the local run's do.
TEST(MoeCli, WatchAndStatusShowTheLoadBalancingLossAndExpertsRouted) {
  DaemonProcess d("moe_watch");
  ASSERT_TRUE(d.ok());
  fs::create_directories(d.data_root());
  const std::string config = write_file(d.data_root() + "/config.json", kSparseConfig);
  const std::string spec = write_file(d.data_root() + "/spec.yaml", moe_spec(config, 3));
  RunResult r = d.cli({"submit", spec, "--watch", "--json"}, 300);
  ASSERT_EQ(r.rc, 0) << describe(r);
  const std::vector<Json> lines = r.json_lines();
  ASSERT_FALSE(lines.empty()) << describe(r);
  long routed_min = 0;
  EXPECT_EQ(moe_step_events(lines, routed_min).size(), 3u);
  const Json* id = lines.front().find("id");  // the "submitted" event
  ASSERT_NE(id, nullptr) << describe(r);
  RunResult status = d.cli({"status", id->as_string()});
  EXPECT_NE(status.out.find("routed, load-balancing loss"), std::string::npos) << describe(status);
}

TEST(MoeCli, ResumeAfterKill9IsBitExactWithIdleExperts) {
  const std::string dir = fresh_dir("moe_resume");
  const std::string config = write_file(dir + "/config.json", kSparseConfig);
  const long steps = 20;  // the kill after step 5 lands within a page of step lines (train_and_kill)
  const std::string spec = write_file(dir + "/spec.yaml", moe_spec(config, steps));
  RunResult whole = megatrain({"train", spec, "--json", "--out", dir + "/whole"}, {}, 300);
  ASSERT_EQ(whole.rc, 0) << describe(whole);
  long routed_min = 0;
  EXPECT_EQ(moe_step_events(whole.json_lines(), routed_min).size(), size_t(steps));
  EXPECT_GT(routed_min, 0);
  EXPECT_LT(routed_min, 32) << "8 tokens of top-1 reach at most 8 experts a layer";

  const KilledRun killed = train_and_kill(spec, dir + "/killed", 5);  // past the checkpoints of steps 2 and 4
  ASSERT_GT(killed.step, 0) << "the run ended before it was killed:\n" << killed.seen;
  ASSERT_LT(killed.step, steps);

  RunResult resumed = megatrain({"train", spec, "--json", "--out", dir + "/killed"}, {}, 300);
  ASSERT_EQ(resumed.rc, 0) << describe(resumed);
  for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
    auto a = read_file(step_dir(dir + "/whole", steps) + "/" + f);
    auto b = read_file(step_dir(dir + "/killed", steps) + "/" + f);
    ASSERT_TRUE(a.ok() && b.ok()) << f;
    EXPECT_TRUE(*a == *b) << f << " differs after resume";
  }
  // Each expert's update count is in the checkpoint, equal, and not every expert's is the step.
  auto counts = [&](const std::string& run) {
    auto state = Json::parse(*read_file(step_dir(run, steps) + "/trainer_state.json"));
    EXPECT_TRUE(state.ok());
    const Json* e = state.ok() ? state->find("expert_updates") : nullptr;
    return e ? e->dump() : std::string();
  };
  EXPECT_EQ(counts(dir + "/whole"), counts(dir + "/killed"));
  auto parsed = Json::parse(counts(dir + "/whole"));
  ASSERT_TRUE(parsed.ok() && parsed->is_array()) << counts(dir + "/whole");
  EXPECT_EQ(parsed->items().size(), 32u);  // 2 layers x 16 experts
  long below = 0;
  for (const Json& n : parsed->items()) below += n.as_int() < steps;
  EXPECT_GT(below, 0) << "some expert must have sat out some step";
  if (!HasFailure()) fs::remove_all(dir);
}

// init.from a MoE checkpoint with weights_only: the weights alone (no moments, no per-expert
// update counts, step 0), equal byte for byte to starting from an fp32 export of them.
TEST(MoeCli, WeightsOnlyFromACheckpointIsItsExportsRun) {
  const std::string dir = fresh_dir("moe_weights_only");
  const std::string config = write_file(dir + "/config.json", kSparseConfig);
  RunResult a = megatrain({"train", write_file(dir + "/a.yaml", moe_spec(config, 4)), "--out", dir + "/a"}, {}, 300);
  ASSERT_EQ(a.rc, 0) << describe(a);
  ASSERT_EQ(megatrain({"export", dir + "/a", dir + "/export", "--dtype", "fp32"}).rc, 0);
  ASSERT_TRUE(fs::remove(step_dir(dir + "/a", 4) + "/optimizer.safetensors"));  // the weights alone are read
  auto from = [&](const std::string& name, const std::string& init) {
    std::string yaml = moe_spec(config, 3);
    yaml.replace(yaml.find("init: {seed: 3}"), 15, "init: {" + init + "}");
    RunResult r = megatrain({"train", write_file(dir + "/" + name + ".yaml", yaml), "--out", dir + "/" + name}, {}, 300);
    EXPECT_EQ(r.rc, 0) << describe(r);
    auto weights = read_file(step_dir(dir + "/" + name, 3) + "/model.safetensors");
    auto moments = read_file(step_dir(dir + "/" + name, 3) + "/optimizer.safetensors");
    return weights.ok() && moments.ok() ? *weights + *moments : std::string("missing");
  };
  const std::string w = from("w", "from: " + dir + "/a/checkpoints, weights_only: true");
  const std::string e = from("e", "from: " + dir + "/export");
  EXPECT_NE(w, "missing");
  EXPECT_TRUE(w == e) << "weights_only and the export's run differ";
  if (!HasFailure()) fs::remove_all(dir);
}

// The real shapes on one H200: gpt-oss-120b fits 1.5 TB of host memory (compact layout) with its
// experts streamed; qwen3-235b-a22b does not, and the plan says by how much.
TEST(MoeCli, PlansTheRealShapesOnOneH200) {
  const std::string dir = fresh_dir("moe_plan");
  auto plan = [&](const std::string& preset, const std::string& layout) {
    const std::string spec = write_file(dir + "/" + preset + ".yaml",
                                        "model: {preset: " + preset + "}\nseq_len: 4096\nmicro_batch: 1\n"
                                        "global_batch: 16\nprecision: bf16\nbackend: cuda\nmemory: {layout: " + layout + "}\n");
    return megatrain({"plan", spec, "--host-memory", "1.5TB", "--device-memory", "140GB", "--json"});
  };
  RunResult oss = plan("gpt-oss-120b", "compact");
  ASSERT_EQ(oss.rc, 0) << describe(oss);
  auto j = Json::parse(oss.out);
  ASSERT_TRUE(j.ok()) << oss.out;
  EXPECT_TRUE(j->find("fits")->as_bool()) << oss.out;
  EXPECT_GT(j->find("params")->as_int(), int64_t(110e9));
  EXPECT_LT(j->find("active_params")->as_int(), int64_t(6e9));
  EXPECT_EQ(j->find("expert_slots")->as_int(), 2);
  RunResult qwen = plan("qwen3-235b-a22b", "compact");
  ASSERT_EQ(qwen.rc, 2) << describe(qwen);  // does not fit: RESOURCE_EXHAUSTED's exit code
  auto q = Json::parse(qwen.out.substr(0, qwen.out.find('\n')));  // the plan; then the error object
  ASSERT_TRUE(q.ok()) << qwen.out;
  EXPECT_FALSE(q->find("fits")->as_bool()) << qwen.out;
  EXPECT_NE(q->find("reason")->as_string().find("host memory"), std::string::npos) << qwen.out;
  if (!HasFailure()) fs::remove_all(dir);
}

}  // namespace
}  // namespace mt::cli::testing

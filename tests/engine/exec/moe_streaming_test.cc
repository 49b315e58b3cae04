// Mixtures of experts on the streaming executor against the resident reference: bit for bit on
// the CPU backend (losses, norms, the load-balancing loss, masters, moments, shadows and each
// expert's update count), with experts that receive no token left untouched (not uploaded, not
// updated), and its refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <ostream>
#include <vector>

#include "engine/exec/resident_executor.h"
#include "engine/exec/streaming_executor.h"
#include "tests/engine/moe_models.h"

namespace mt {
namespace {

using testing_util::moe_model;

TrainOptions moe_options(int seq_len, int micro_batch, int global_batch) {
  TrainOptions o;
  o.seq_len = seq_len;
  o.micro_batch = micro_batch;
  o.global_batch = global_batch;
  o.optimizer.lr = 3e-3f;
  o.optimizer.grad_clip = 0.05f;  // active on some steps
  o.schedule = {1, LrDecay::kCosine, 0.1f, 4};
  return o;
}

void expect_same_state(const HostStore& a, const HostStore& b) {
  ASSERT_EQ(a.num_units(), b.num_units());
  for (size_t u = 0; u < a.num_units(); ++u) {
    const size_t bytes = a.unit(u).numel * sizeof(float);
    EXPECT_EQ(0, std::memcmp(a.unit(u).master, b.unit(u).master, bytes)) << "master of unit " << u;
    EXPECT_EQ(0, std::memcmp(a.unit(u).m, b.unit(u).m, bytes)) << "adam m of unit " << u;
    EXPECT_EQ(0, std::memcmp(a.unit(u).v, b.unit(u).v, bytes)) << "adam v of unit " << u;
    if (a.unit(u).shadow) {
      EXPECT_EQ(0, std::memcmp(a.unit(u).shadow, b.unit(u).shadow, a.unit(u).numel * sizeof(bf16))) << "shadow " << u;
    }
  }
  EXPECT_EQ(a.expert_updates(), b.expert_updates());
}

struct Case {
  const char* name;
  const char* model;  // tests/engine/moe_models.h
  Precision precision = Precision::kFp32;
  int token_chunk = 0;
  CheckpointPlacement placement = CheckpointPlacement::kDevice;
  int expert_slots = 2;
  int seq_len = 12, micro_batch = 2, global_batch = 4;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class MoeStreamingVsResident : public ::testing::TestWithParam<Case> {};

TEST_P(MoeStreamingVsResident, BitForBitOverSeveralSteps) {
  const Case& c = GetParam();
  const ModelConfig cfg = moe_model(c.model);
  ASSERT_TRUE(cfg.has_experts());
  TrainOptions opt = moe_options(c.seq_len, c.micro_batch, c.global_batch);
  opt.precision = c.precision;
  opt.token_chunk = c.token_chunk;
  auto res = ResidentExecutor::create(cfg, opt);
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  StreamingOptions so;
  so.placement = c.placement;
  so.expert_slots = c.expert_slots;
  auto str = StreamingExecutor::create(cfg, opt, so, make_cpu_backend({}));
  ASSERT_TRUE(str.ok()) << str.status().to_string();
  init_weights(cfg, (*res)->store(), 7);
  init_weights(cfg, (*str)->store(), 7);
  auto src = make_synthetic_source({5, cfg.vocab_size, 16, 3});
  Batch b;
  bool clipped = false, unclipped = false, idle_expert = false;
  for (int s = 0; s < 4; ++s) {
    ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, b).ok());
    if (s == 1) b.targets[3] = -1;
    auto r1 = (*res)->step(b);
    auto r2 = (*str)->step(b);
    ASSERT_TRUE(r1.ok()) << r1.status().to_string();
    ASSERT_TRUE(r2.ok()) << r2.status().to_string();
    EXPECT_EQ(r1->loss, r2->loss) << "step " << s;
    EXPECT_EQ(r1->grad_norm, r2->grad_norm) << "step " << s;
    EXPECT_EQ(r1->aux_loss, r2->aux_loss) << "step " << s;
    EXPECT_GT(r2->aux_loss, 0.0);
    EXPECT_EQ(r1->experts_routed, r2->experts_routed) << "step " << s;
    EXPECT_EQ(r2->experts_total, cfg.num_moe_layers() * cfg.moe.num_experts);
    EXPECT_EQ(int(r2->expert_load.size()), cfg.num_moe_layers());
    // Only the routed experts cross the link: their bytes against every expert's.
    const uint64_t expert_bytes = build_param_schemas(cfg).back().numel * compute_elem_bytes(c.precision);
    EXPECT_EQ(r2->expert_h2d_bytes, 2 * uint64_t(r2->experts_routed) * expert_bytes);
    EXPECT_EQ(r2->dense_expert_h2d_bytes, 2 * uint64_t(r2->experts_total) * expert_bytes);
    clipped |= r2->clipped;
    unclipped |= !r2->clipped;
    idle_expert |= r2->experts_routed < r2->experts_total;
  }
  EXPECT_TRUE(clipped);
  ASSERT_TRUE((*str)->sync().ok());
  expect_same_state((*res)->store(), (*str)->store());
  if (c.global_batch * c.seq_len < cfg.moe.num_experts) {
    EXPECT_TRUE(idle_expert) << "the case must leave experts idle";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cpu, MoeStreamingVsResident,
    ::testing::Values(Case{"mixtral", "mixtral"},
                      Case{"Bf16_mixtral", "mixtral", Precision::kBf16},
                      Case{"qwen2_moe_shared_dense_Chunk5", "qwen2_moe", Precision::kFp32, 5},
                      Case{"qwen3_moe_host", "qwen3_moe", Precision::kFp32, 0, CheckpointPlacement::kHost, 3},
                      Case{"gpt_oss", "gpt_oss"},
                      Case{"Bf16_gpt_oss_Chunk7_one_expert_slot", "gpt_oss", Precision::kBf16, 7,
                           CheckpointPlacement::kDevice, 1},
                      // One micro-batch a step: the backward takes micro-batch 0's activations as
                      // the experts' pass left them (no recompute of its decoder forward).
                      Case{"qwen3_moe_one_micro_batch", "qwen3_moe", Precision::kFp32, 0, CheckpointPlacement::kDevice, 2,
                           12, 4, 4},
                      Case{"Bf16_gpt_oss_one_micro_batch_host", "gpt_oss", Precision::kBf16, 0, CheckpointPlacement::kHost,
                           2, 12, 4, 4},
                      // 6 tokens a step, 16 experts, one each: most experts idle every step.
                      Case{"sparse_idle_experts", "sparse", Precision::kFp32, 0, CheckpointPlacement::kDevice, 2, 3, 1,
                           2}),
    [](const auto& info) { return std::string(info.param.name); });

// An expert no token reached in a step keeps its weights, its moments and its step count; one
// that was reached is updated, its count rising by one.
TEST(MoeStreaming, AnExpertWithoutTokensIsNotUpdated) {
  const ModelConfig cfg = moe_model("sparse");
  const TrainOptions opt = moe_options(3, 1, 2);
  auto ex = StreamingExecutor::create_cpu(cfg, opt, StreamingOptions{});
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  HostStore& store = (*ex)->store();
  init_weights(cfg, store, 2);
  const auto units = build_param_schemas(cfg);
  auto src = make_synthetic_source({6, cfg.vocab_size, 16, 3});
  Batch b;
  ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, b).ok());
  std::vector<std::vector<float>> before;
  for (size_t u = 0; u < units.size(); ++u) before.emplace_back(store.unit(u).master, store.unit(u).master + units[u].numel);
  auto st = (*ex)->step(b);
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  ASSERT_TRUE((*ex)->sync().ok());
  const std::vector<long> counts = store.expert_updates();
  size_t i = 0, idle = 0, busy = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    if (units[u].kind != UnitKind::kExpert) continue;
    const bool changed = std::memcmp(before[u].data(), store.unit(u).master, units[u].numel * sizeof(float)) != 0;
    const bool moved = std::any_of(static_cast<const float*>(store.unit(u).m),
                                   static_cast<const float*>(store.unit(u).m) + units[u].numel, [](float x) { return x != 0; });
    EXPECT_EQ(changed, counts[i] == 1) << "expert unit " << u;
    EXPECT_EQ(moved, counts[i] == 1) << "expert unit " << u;
    (counts[i] ? busy : idle) += 1;
    ++i;
  }
  EXPECT_EQ(long(busy), st->experts_routed);
  EXPECT_GT(idle, 0u);
  EXPECT_GT(busy, 0u);
  EXPECT_LT(st->h2d_bytes, uint64_t(cfg.num_params()) * 4 + st->dense_expert_h2d_bytes);
}

TEST(MoeStreaming, RefusesSeveralDevicesAndConvertUploads) {
  const ModelConfig cfg = moe_model("mixtral");
  TrainOptions opt = moe_options(12, 2, 4);
  PlanOptions po;
  po.devices = 2;
  auto plan = plan_memory(cfg, opt, po);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("one device"), std::string::npos) << plan.status().to_string();
  opt.precision = Precision::kBf16;
  StreamingOptions so;
  so.bf16_uploads = Bf16Uploads::kConvert;
  auto ex = StreamingExecutor::create_cpu(cfg, opt, so);
  ASSERT_FALSE(ex.ok());
  EXPECT_NE(ex.status().message().find("bf16_uploads"), std::string::npos) << ex.status().to_string();
}

}  // namespace
}  // namespace mt

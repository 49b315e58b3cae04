// The memory planner: every preset plans instantly without allocating, host bytes per parameter
// follow the layout, and budgets are enforced with the numbers.
#include <gtest/gtest.h>

#include "engine/exec/planner.h"
#include "engine/exec/streaming_executor.h"
#include "tests/engine/test_model.h"

namespace mt {
namespace {

TEST(Planner, EveryPresetPlansWithoutAllocating) {
  TrainOptions opt;
  opt.seq_len = 1024;
  opt.micro_batch = 4;
  opt.global_batch = 64;
  for (const auto& name : preset_names()) {
    auto cfg = preset_config(name);
    ASSERT_TRUE(cfg.ok()) << name;
    for (auto layout : {MemoryLayout::kExact, MemoryLayout::kCompact}) {
      opt.layout = layout;
      auto p = plan_memory(*cfg, opt, {});  // a 120B model would need 1.9 TB if this allocated
      ASSERT_TRUE(p.ok()) << name << ": " << p.status().to_string();
      const uint64_t per_param = layout == MemoryLayout::kExact ? 16 : 10, gb = per_param == 16 ? 4 : 2;
      uint64_t state = 0, routing = 0;
      for (const auto& [kind, bytes] : p->host_by_kind) {
        if (kind == "master" || kind == "grad" || kind == "adam_m" || kind == "adam_v") state += bytes;
        if (kind == "moe_routing") routing += bytes;  // a mixture of experts' routing offsets and statistics
      }
      const uint64_t units = build_param_schemas(*cfg).size();  // experts are units of their own
      // The HostStore's layout: per_param bytes a parameter, each unit's regions 4 KiB aligned.
      EXPECT_EQ(state, host_store_bytes(build_param_schemas(*cfg), layout, false).total()) << name;
      EXPECT_GE(state, per_param * uint64_t(p->params)) << name;
      EXPECT_LT(state - per_param * uint64_t(p->params), 4 * 4096 * units) << name;
      // Beyond the per-parameter state: embedding-row staging (4 B per embedding element at
      // most), the head's loss totals (2 doubles per micro-batch), the batch's staging (inputs,
      // targets, positions and document starts: 4 int32 a token, 1 a micro-batch) and a tied
      // head's gradient share (gb); layer inputs stay on the device here.
      const uint64_t emb = uint64_t(cfg->vocab_size) * uint64_t(cfg->hidden_size);
      const uint64_t micro_batches = uint64_t(opt.global_batch / opt.micro_batch);
      const uint64_t loss_totals = micro_batches * 2 * sizeof(double);
      const uint64_t batch = batch_staging_bytes(opt);
      EXPECT_LE(p->host_bytes - state - routing,
                emb * (4 + (cfg->tie_word_embeddings ? gb : 0)) + loss_totals + batch) << name;
      EXPECT_GT(p->host_bytes, state) << name;
      EXPECT_GT(p->device_bytes, 0u);
      EXPECT_TRUE(p->fits);
    }
  }
}

TEST(Planner, Dense120bCompactFitsInOnePointFiveTerabytes) {
  auto cfg = preset_config("dense-120b");
  ASSERT_TRUE(cfg.ok());
  TrainOptions opt;
  opt.layout = MemoryLayout::kCompact;
  opt.seq_len = 1024;
  opt.micro_batch = 1;
  opt.global_batch = 64;
  PlanOptions po;
  po.host_budget = 1500ull * 1000 * 1000 * 1000;
  auto p = plan_memory(*cfg, opt, po);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->fits) << p->reason;
  EXPECT_LE(p->host_bytes_per_param, 10.5);
  EXPECT_GT(p->params, 115'000'000'000);
}

TEST(Planner, HostBudgetRefusalCarriesTheNumbers) {
  auto cfg = preset_config("llama3-70b");
  ASSERT_TRUE(cfg.ok());
  PlanOptions po;
  po.host_budget = 128ull << 30;
  auto p = plan_memory(*cfg, TrainOptions{}, po);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->fits);
  EXPECT_NE(p->reason.find("host memory"), std::string::npos);
  EXPECT_NE(p->reason.find(std::to_string(128ull << 30)), std::string::npos) << p->reason;
}

// `small` at 64 x 512 tokens a step: its layer inputs dominate the device plan.
TrainOptions small_run() {
  TrainOptions opt;
  opt.seq_len = 512;
  opt.micro_batch = 4;
  opt.global_batch = 64;
  return opt;
}

TEST(Planner, AutoPlacementMovesCheckpointsToHostWhenTheDeviceIsSmall) {
  auto cfg = preset_config("small");
  ASSERT_TRUE(cfg.ok());
  const TrainOptions opt = small_run();
  auto big = plan_memory(*cfg, opt, {});
  ASSERT_TRUE(big.ok());
  EXPECT_TRUE(big->checkpoints_on_device);
  PlanOptions po;
  po.device_budget = big->device_bytes - 1;
  auto small = plan_memory(*cfg, opt, po);
  ASSERT_TRUE(small.ok());
  EXPECT_FALSE(small->checkpoints_on_device);
  EXPECT_TRUE(small->fits) << small->reason;
  EXPECT_GT(small->host_bytes, big->host_bytes);
}

TEST(Planner, ByteCountsThatOverflowAreRefusedNotWrapped) {
  // Dimensions past ModelLimits cannot come from a config.json; built directly, the planner
  // still refuses rather than wrapping to a small number that "fits".
  ModelConfig cfg = *preset_config("tiny");
  cfg.hidden_size = cfg.vocab_size = 1 << 30;
  cfg.num_heads = cfg.num_kv_heads = 1;
  cfg.head_dim = 64;
  TrainOptions opt;
  opt.seq_len = 64;
  opt.micro_batch = opt.global_batch = 1;
  auto p = plan_memory(cfg, opt, {});
  ASSERT_FALSE(p.ok()) << "planned " << p->host_bytes << " bytes, fits " << p->fits;
  EXPECT_NE(p.status().message().find("overflow"), std::string::npos) << p.status().message();
}

// One answer: the plan is what the streaming executor allocates, to the byte, on the host (the
// HostStore and its staging buffers) and on the device.
// The backend's own device buffers (CUDA: cuBLASLt workspace, staging, op scratch) are part of
// the device total and of the budget, but not of the arena the executor reserves.
TEST(DeviceBudget, TheBackendsOwnBuffersCountAgainstTheBudgetOutsideTheArena) {
  auto cfg = preset_config("small");
  ASSERT_TRUE(cfg.ok());
  const TrainOptions opt = small_run();
  auto bare = plan_memory(*cfg, opt, {});
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->arena_bytes, bare->device_bytes);
  PlanOptions po;
  po.backend_bytes = 48ull << 20;
  auto with = plan_memory(*cfg, opt, po);
  ASSERT_TRUE(with.ok());
  EXPECT_EQ(with->device_bytes, bare->device_bytes + po.backend_bytes);
  EXPECT_EQ(with->arena_bytes, bare->arena_bytes);
  EXPECT_EQ(with->device_by_kind.back(), std::make_pair(std::string("backend"), po.backend_bytes));
  po.device_budget = bare->device_bytes;  // the arena alone would fit; with the backend's buffers it does not
  auto tight = plan_memory(*cfg, opt, po);
  ASSERT_TRUE(tight.ok());
  EXPECT_FALSE(tight->checkpoints_on_device);
  EXPECT_TRUE(tight->fits) << tight->reason;
  EXPECT_LE(tight->device_bytes, po.device_budget);
}

TEST(Planner, EqualsWhatTheStreamingExecutorAllocates) {
  for (const auto uploads : {Bf16Uploads::kShadow, Bf16Uploads::kConvert})
  for (const auto precision : {Precision::kFp32, Precision::kBf16})
  for (const bool tied : {false, true})
    for (const auto layout : {MemoryLayout::kExact, MemoryLayout::kCompact})
      for (const auto placement : {CheckpointPlacement::kDevice, CheckpointPlacement::kHost}) {
        const ModelConfig cfg = testing_util::test_model_config({"LlamaForCausalLM", 32, 3, 4, 2, 48, 64, tied});
        TrainOptions opt;
        opt.seq_len = 16;
        opt.micro_batch = 2;
        opt.global_batch = 4;
        opt.layout = layout;
        opt.precision = precision;
        StreamingOptions so;
        so.placement = placement;
        so.bf16_uploads = uploads;
        PlanOptions po;
        po.placement = placement;
        po.bf16_uploads = uploads;
        auto plan = plan_memory(cfg, opt, po);
        auto ex = StreamingExecutor::create_cpu(cfg, opt, so);
        ASSERT_TRUE(plan.ok() && ex.ok());
        EXPECT_EQ(plan->host_bytes, (*ex)->host_bytes()) << "tied " << tied << ", layout " << memory_layout_name(layout)
                                                         << ", " << precision_name(precision) << ", uploads " << int(uploads);
        EXPECT_EQ(plan->device_bytes, (*ex)->plan().device_bytes);
        EXPECT_LE((*ex)->device_peak(), plan->device_bytes);
        // One step, so the peak is what a step really uses.
        auto src = make_synthetic_source({1, cfg.vocab_size, 16, 2});
        Batch b;
        ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, b).ok());
        ASSERT_TRUE((*ex)->step(b).ok());
        EXPECT_LE((*ex)->device_peak(), plan->device_bytes) << precision_name(precision);
      }
}

// bf16 (MixedPrecision): weights, layer inputs and residual gradients take 2 bytes on the device,
// gradients stay fp32, and the host gains the 2-byte shadow the uploads copy.
TEST(Planner, MixedPrecisionHalvesDeviceWeightsAndAddsTheHostShadow) {
  auto cfg = preset_config("qwen2.5-7b");
  ASSERT_TRUE(cfg.ok());
  TrainOptions opt;
  opt.seq_len = 4096;
  opt.micro_batch = 1;
  opt.global_batch = 8;
  auto f32 = plan_memory(*cfg, opt, {});
  opt.precision = Precision::kBf16;
  auto b16 = plan_memory(*cfg, opt, {});
  ASSERT_TRUE(f32.ok() && b16.ok());
  auto kind = [](const std::vector<std::pair<std::string, uint64_t>>& kinds, const std::string& k) {
    for (const auto& [name, bytes] : kinds)
      if (name == k) return bytes;
    return uint64_t(0);
  };
  EXPECT_EQ(kind(b16->device_by_kind, "grad_slots"), kind(f32->device_by_kind, "grad_slots"));
  for (const char* k : {"weight_slots", "checkpoints", "residual_grads"}) {
    const double r = double(kind(b16->device_by_kind, k)) / double(kind(f32->device_by_kind, k));
    EXPECT_NEAR(r, 0.5, 1e-3) << k;
  }
  EXPECT_EQ(kind(f32->host_by_kind, "bf16_shadow"), 0u);
  EXPECT_NEAR(double(kind(b16->host_by_kind, "bf16_shadow")), 2.0 * double(b16->params), 0.001 * double(b16->params));
  EXPECT_NEAR(b16->host_bytes_per_param - f32->host_bytes_per_param, 2.0, 0.01);
  EXPECT_LT(b16->device_bytes, f32->device_bytes * 0.6);
}

}  // namespace
}  // namespace mt

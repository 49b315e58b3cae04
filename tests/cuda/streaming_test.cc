// The unchanged StreamingExecutor on the CudaBackend: a tiny model trained for several steps
// matches the CPU backend's losses within 1e-4 relative (fp32 everywhere; the two differ only
// in summation order and exp/sqrt rounding), and the same run twice is bit-identical.
#include <gtest/gtest.h>

#include <ostream>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/exec/streaming_executor.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/engine/test_model.h"

namespace mt {
namespace {

ModelConfig tiny(bool tied, bool qwen) {
  return testing_util::test_model_config({qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM", 64, 3, 4, 2, 96, 97, tied});
}

TrainOptions options(MemoryLayout layout) {
  TrainOptions o;
  o.seq_len = 40;
  o.micro_batch = 2;
  o.global_batch = 6;
  o.optimizer.lr = 3e-3f;
  o.optimizer.grad_clip = 0.5f;
  o.schedule = {2, LrDecay::kCosine, 0.1f, 6};
  o.layout = layout;
  return o;
}

struct Case {
  const char* name;
  bool tied, qwen;
  CheckpointPlacement placement;
  MemoryLayout layout;
};
// Printed by name, so ctest's test names are stable (not the struct's bytes).
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<double> run(const Case& c, bool cuda, int steps) {
  const ModelConfig cfg = tiny(c.tied, c.qwen);
  const TrainOptions opt = options(c.layout);
  StreamingOptions so;
  so.placement = c.placement;
  std::unique_ptr<Backend> backend;
  if (cuda) {
    auto b = make_cuda_backend({});
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    if (!b.ok()) return {};
    backend = std::move(b).value();
  } else {
    backend = make_cpu_backend({});
  }
  Backend* raw = backend.get();
  auto ex = StreamingExecutor::create(cfg, opt, so, std::move(backend));
  EXPECT_TRUE(ex.ok()) << ex.status().to_string();
  if (!ex.ok()) return {};
  init_weights(cfg, (*ex)->store(), 3);
  auto src = make_synthetic_source({5, cfg.vocab_size, 32, 3});
  Batch b;
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    EXPECT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, b).ok());
    if (s == 1) b.targets[5] = b.targets[17] = -1;
    auto r = (*ex)->step(b);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (!r.ok()) return {};
    EXPECT_TRUE(raw->error().ok()) << raw->error().to_string();
    losses.push_back(r->loss);
  }
  EXPECT_TRUE((*ex)->sync().ok());
  EXPECT_TRUE(raw->error().ok()) << raw->error().to_string();
  return losses;
}

class CudaStreaming : public ::testing::TestWithParam<Case> {};

TEST_P(CudaStreaming, LossesMatchCpuBackend) {
  MT_REQUIRE_CUDA();
  const auto cpu = run(GetParam(), false, 5), gpu = run(GetParam(), true, 5);
  ASSERT_EQ(cpu.size(), 5u);
  ASSERT_EQ(gpu.size(), 5u);
  for (size_t i = 0; i < cpu.size(); ++i)
    EXPECT_NEAR(gpu[i], cpu[i], 1e-4 * std::fabs(cpu[i])) << "step " << i;
  EXPECT_LT(gpu.back(), gpu.front()) << "training lowers the loss";
}

TEST_P(CudaStreaming, SameRunTwiceIsBitIdentical) {
  MT_REQUIRE_CUDA();
  const auto a = run(GetParam(), true, 4), b = run(GetParam(), true, 4);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CudaStreaming,
    ::testing::Values(Case{"untied_device", false, false, CheckpointPlacement::kDevice, MemoryLayout::kExact},
                      Case{"tied_qwen_host_ckpt", true, true, CheckpointPlacement::kHost, MemoryLayout::kExact},
                      Case{"compact", false, true, CheckpointPlacement::kAuto, MemoryLayout::kCompact}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace mt

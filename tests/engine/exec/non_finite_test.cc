// Non-finite numbers fail the step: a NaN/inf loss or gradient norm is refused by both executors
// with the step, the quantity and (for a gradient) the unit, and the update is not applied.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/exec/resident_executor.h"
#include "engine/exec/streaming_executor.h"
#include "tests/engine/test_model.h"

namespace mt {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

ModelConfig small() { return testing_util::test_model_config({"LlamaForCausalLM", 32, 2, 4, 2, 48, 64, false}); }

TrainOptions options() {
  TrainOptions o;
  o.seq_len = 16;
  o.micro_batch = 2;
  o.global_batch = 4;
  return o;
}

std::vector<std::vector<float>> masters(const HostStore& s) {
  std::vector<std::vector<float>> out;
  for (size_t u = 0; u < s.num_units(); ++u) out.emplace_back(s.unit(u).master, s.unit(u).master + s.unit(u).numel);
  return out;
}

void expect_unchanged(const std::vector<std::vector<float>>& before, const HostStore& s) {
  for (size_t u = 0; u < before.size(); ++u)
    EXPECT_EQ(0, std::memcmp(before[u].data(), s.unit(u).master, before[u].size() * sizeof(float))) << "unit " << u;
}

// 0: resident, 1: streaming, 2: streaming with speculative updates (the units that land before
// the non-finite one have been updated, and are restored).
std::unique_ptr<Executor> make(int kind, const ModelConfig& cfg) {
  StreamingOptions so;
  so.speculation = kind == 2 ? Speculation::kOn : Speculation::kOff;
  if (kind > 0) return std::move(StreamingExecutor::create_cpu(cfg, options(), so).value());
  return std::move(ResidentExecutor::create(cfg, options()).value());
}

Batch batch(const ModelConfig& cfg) {
  Batch b;
  auto src = make_synthetic_source({5, cfg.vocab_size, 32, 3});
  EXPECT_TRUE(src.value()->next_batch(options().global_batch, options().seq_len, b).ok());
  return b;
}

class NonFinite : public ::testing::TestWithParam<int> {};  // make()'s kind; non-zero: streaming

TEST_P(NonFinite, NanWeightsFailTheStepOnTheLossWithoutUpdating) {
  const ModelConfig cfg = small();
  auto ex = make(GetParam(), cfg);
  init_weights(cfg, ex->store(), 3);
  ex->store().unit(1).master[0] = kNaN;  // a decoder weight every position reads
  const auto before = masters(ex->store());
  auto r = ex->step(batch(cfg));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("step 1: the loss is not finite (nan)", 0), 0u) << r.status().message();
  if (GetParam()) {
    EXPECT_FALSE(ex->sync().ok());  // streaming: the refusal stays
  }
  expect_unchanged(before, ex->store());
}

TEST_P(NonFinite, NonFiniteGradientWithFiniteLossFailsNamingTheUnit) {
  // The first sequence reads only an embedding row nothing else reads, and all its targets are
  // masked: a NaN there leaves the loss (of the other sequences) finite but poisons the gradients.
  const ModelConfig cfg = small();
  auto ex = make(GetParam(), cfg);
  init_weights(cfg, ex->store(), 3);
  Batch b = batch(cfg);
  const int poisoned = cfg.vocab_size - 1, T = options().seq_len;
  for (int32_t& t : b.inputs) t = t == poisoned ? 0 : t;
  for (int32_t& t : b.targets) t = t == poisoned ? 0 : t;
  for (int i = 0; i < T; ++i) {
    b.inputs[size_t(i)] = poisoned;
    b.targets[size_t(i)] = -1;
  }
  ex->store().unit(0).master[size_t(poisoned) * cfg.hidden_size] = kNaN;
  const auto before = masters(ex->store());
  auto r = ex->step(b);
  Status st = r.ok() ? ex->step(b).status() : r.status();  // streaming: the next step reports it
  if (r.ok()) {
    EXPECT_TRUE(std::isfinite(r->loss));
  }
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message().rfind("step 1: the gradient norm is not finite", 0), 0u) << st.message();
  EXPECT_NE(st.message().find("first non-finite gradient in unit"), std::string::npos) << st.message();
  if (GetParam()) {
    EXPECT_FALSE(ex->sync().ok());
  }
  expect_unchanged(before, ex->store());
}

INSTANTIATE_TEST_SUITE_P(Executors, NonFinite, ::testing::Values(0, 1, 2), [](const auto& info) {
  return std::string(info.param == 0 ? "Resident" : info.param == 1 ? "Streaming" : "Speculative");
});

TEST(NonFinite, EvaluateRefusesANonFiniteLoss) {
  const ModelConfig cfg = small();
  TrainOptions o = options();
  o.micro_batch = o.global_batch = 1;
  auto ex = ResidentExecutor::create(cfg, o);
  ASSERT_TRUE(ex.ok());
  init_weights(cfg, (*ex)->store(), 3);
  (*ex)->store().unit(1).master[0] = kNaN;
  Batch b;
  ASSERT_TRUE(make_synthetic_source({5, cfg.vocab_size, 32, 3}).value()->next_batch(2, 16, b).ok());
  auto loss = (*ex)->mean_loss(b);
  ASSERT_FALSE(loss.ok());
  EXPECT_NE(loss.status().message().find("not finite"), std::string::npos) << loss.status().message();
}

}  // namespace
}  // namespace mt

// A device fault (a compute op of the CPU backend made to fail, as a CUDA kernel can): the step
// it happens in fails naming the op, no update of that step or any later one is applied (the
// optimizer never reads a gradient a failed copy did not write), and the error is sticky.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "engine/exec/resident_executor.h"
#include "engine/exec/streaming_executor.h"
#include "tests/engine/test_model.h"

namespace mt {
namespace {

// Fails the nth call (1-based) of the compute op `name`. Asked on the compute worker only.
std::function<bool(const char*)> fail_nth(std::string name, int nth) {
  auto seen = std::make_shared<int>(0);
  return [name, nth, seen](const char* op) { return name == op && ++*seen == nth; };
}

struct FaultCase {
  const char* name;
  const char* op;  // fails in step 2: its first call of this op in that step, the
  int calls_a_step;  // calls_a_step + 1st (three micro-batches, three layers)
  bool tied;
  CheckpointPlacement placement;
  bool sync_compute;
};
void PrintTo(const FaultCase& c, std::ostream* os) { *os << c.name; }

class StreamingFault : public ::testing::TestWithParam<FaultCase> {};

void expect_same_state(const HostStore& a, const HostStore& b) {
  for (size_t u = 0; u < a.num_units(); ++u) {
    const size_t bytes = a.unit(u).numel * sizeof(float);
    EXPECT_EQ(0, std::memcmp(a.unit(u).master, b.unit(u).master, bytes)) << "master of unit " << u;
    EXPECT_EQ(0, std::memcmp(a.unit(u).m, b.unit(u).m, bytes)) << "adam m of unit " << u;
    EXPECT_EQ(0, std::memcmp(a.unit(u).v, b.unit(u).v, bytes)) << "adam v of unit " << u;
  }
}

// Step 1 is good; step 2 faults. The weights and moments stay exactly as step 1 left them
// (the resident executor after one step), and steps 2 and 3 fail naming the op.
TEST_P(StreamingFault, TheFaultedStepFailsNamingTheOpAndAppliesNoUpdate) {
  const FaultCase& c = GetParam();
  const ModelConfig cfg = testing_util::test_model_config({"LlamaForCausalLM", 32, 3, 4, 2, 48, 64, c.tied});
  TrainOptions opt;
  opt.seq_len = 16;
  opt.micro_batch = 2;
  opt.global_batch = 6;  // three micro-batches: step 2's first call of an op is its 4th
  opt.optimizer.lr = 3e-3f;
  opt.optimizer.grad_clip = 1.0f;
  auto res = ResidentExecutor::create(cfg, opt);
  ASSERT_TRUE(res.ok());
  CpuBackendOptions bo;
  bo.sync_compute = c.sync_compute;
  bo.inject_fault = fail_nth(c.op, c.calls_a_step + 1);
  StreamingOptions so;
  so.placement = c.placement;
  auto str = StreamingExecutor::create(cfg, opt, so, make_cpu_backend(bo));
  ASSERT_TRUE(str.ok()) << str.status().to_string();
  init_weights(cfg, (*res)->store(), 3);
  init_weights(cfg, (*str)->store(), 3);
  auto src = make_synthetic_source({5, cfg.vocab_size, 32, 3});
  Batch b;
  ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, b).ok());
  ASSERT_TRUE((*res)->step(b).ok());
  ASSERT_TRUE((*str)->step(b).ok());
  ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, b).ok());
  for (int s = 2; s <= 3; ++s) {
    auto r = (*str)->step(b);
    ASSERT_FALSE(r.ok()) << "step " << s << " ran on a failed device";
    EXPECT_NE(r.status().message().find(std::string("(") + c.op + "): injected device fault"), std::string::npos)
        << r.status().message();
  }
  const Status synced = (*str)->sync();
  EXPECT_FALSE(synced.ok());
  EXPECT_NE(synced.message().find(c.op), std::string::npos) << synced.message();
  expect_same_state((*res)->store(), (*str)->store());
}

INSTANTIATE_TEST_SUITE_P(
    Cpu, StreamingFault,
    ::testing::Values(
        FaultCase{"first_op_of_the_step", "embedding_forward", 3, false, CheckpointPlacement::kDevice, false},
        FaultCase{"lm_head", "lm_head_loss", 3, true, CheckpointPlacement::kHost, false},
        FaultCase{"decoder_backward", "attention_backward", 9, false, CheckpointPlacement::kHost, false},
        // The step's last gradient: every other unit's landed intact, the embedding's copy never
        // runs, and its host buffer still holds step 1's gradient.
        FaultCase{"embedding_backward", "embedding_backward", 3, false, CheckpointPlacement::kDevice, false},
        FaultCase{"embedding_backward_tied", "embedding_backward", 3, true, CheckpointPlacement::kDevice, false},
        FaultCase{"embedding_backward_sync_compute", "embedding_backward", 3, false, CheckpointPlacement::kDevice,
                  true}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace mt

// The `tiny` preset trains at T = 65,536 tokens in one micro-batch on the CPU backend, inside a
// device budget far below what the unchunked layer workspace alone takes (issue 14). The batch
// holds packed documents of 512 tokens: attention's memory is O(T) whatever the mask (q, k, v,
// output, statistics and their gradients for every token), while its time with a full causal
// mask would be T^2 — minutes on a 2-core CI machine (see docs/PERF.md for the timed sweep).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/data/data_source.h"
#include "engine/exec/planner.h"
#include "engine/exec/streaming_executor.h"
#include "engine/model/init.h"
#include "engine/model/model_config.h"

namespace mt {
namespace {

constexpr int kT = 65536, kDoc = 512;

Batch packed_batch(int vocab) {
  Batch b;
  b.num_seqs = 1;
  b.seq_len = kT;
  std::mt19937 rng(3);
  for (int t = 0; t < kT; ++t) {
    b.inputs.push_back(int32_t(rng() % uint32_t(vocab)));
    b.positions.push_back(t % kDoc);
  }
  // A learnable target: the next input within a document (the last token of each is unscored).
  for (int t = 0; t < kT; ++t) b.targets.push_back((t + 1) % kDoc && t + 1 < kT ? b.inputs[size_t(t) + 1] : -1);
  return b;
}

TEST(LongContext, TinyTrainsAt65536TokensInABudgetFarBelowTheUnchunkedWorkspace) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "minutes under AddressSanitizer; the chunked layers' memory safety is Chunk.*'s, run there too";
#endif
  auto cfg = preset_config("tiny");
  ASSERT_TRUE(cfg.ok());
  cfg->max_position_embeddings = kT;
  TrainOptions opt;
  opt.seq_len = kT;
  opt.micro_batch = 1;
  opt.global_batch = 1;
  opt.optimizer.lr = 3e-3f;
  PlanOptions po;
  po.placement = CheckpointPlacement::kHost;
  auto whole = plan_memory(*cfg, opt, po);
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  ASSERT_EQ(whole->token_chunk, 0);

  // Half of what the unchunked layer workspace alone takes, for everything on the device.
  StreamingOptions so;
  so.placement = CheckpointPlacement::kHost;
  so.device_budget = whole->workspace_bytes / 2;
  auto ex = StreamingExecutor::create_cpu(*cfg, opt, so);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  const MemoryPlan& plan = (*ex)->plan();
  ASSERT_TRUE(plan.fits) << plan.reason;
  EXPECT_GE(plan.token_chunk, kMinTokenChunk);
  EXPECT_LT(plan.token_chunk, kT);
  EXPECT_LE(plan.device_bytes, so.device_budget);
  // What the chunk bought: the workspace's chunk-sized part no longer grows with T.
  EXPECT_LT(plan.workspace_split.chunk * 10, whole->workspace_split.chunk)
      << plan.workspace_split.chunk << " vs " << whole->workspace_split.chunk;

  init_weights(*cfg, (*ex)->store(), 1);
  const Batch b = packed_batch(cfg->vocab_size);
  ASSERT_TRUE(validate_batch(b, cfg->vocab_size).ok());
  std::vector<double> losses;
  for (int step = 0; step < 2; ++step) {
    auto st = (*ex)->step(b);
    ASSERT_TRUE(st.ok()) << st.status().to_string();
    ASSERT_TRUE(std::isfinite(st->loss));
    losses.push_back(st->loss);
  }
  EXPECT_LT(losses[1], losses[0]) << "the second step on the same batch lowers its loss";
  EXPECT_LE((*ex)->device_peak(), plan.device_bytes) << "measured peak within the plan";
  RecordProperty("token_chunk", plan.token_chunk);
  RecordProperty("device_bytes", std::to_string(plan.device_bytes));
  RecordProperty("unchunked_workspace_bytes", std::to_string(whole->workspace_bytes));
}

// The split the plan reports: the chunk's part is the same at every T, the sequence's part grows
// exactly linearly in T (attention state: no T x T term anywhere).
TEST(LongContext, WorkspaceGrowsLinearlyInTAtAFixedChunk) {
  auto cfg = preset_config("tiny");
  ASSERT_TRUE(cfg.ok());
  for (const Precision p : {Precision::kFp32, Precision::kBf16}) {
    std::vector<WorkspaceSplit> s;
    for (int T : {4096, 8192, 16384}) {
      LayerShape shape{&*cfg, 1, T, nullptr, 256, 1024};
      s.push_back(p == Precision::kBf16 ? layer_workspace_split<bf16>(shape) : layer_workspace_split<float>(shape));
    }
    EXPECT_EQ(s[0].chunk, s[1].chunk);
    EXPECT_EQ(s[1].chunk, s[2].chunk);
    // Each region is rounded up to 256 bytes, which these T keep exact multiples of.
    EXPECT_EQ(s[1].sequence - s[0].sequence, s[0].sequence);
    EXPECT_EQ(s[2].sequence - s[1].sequence, 2 * s[0].sequence);
  }
}

}  // namespace
}  // namespace mt

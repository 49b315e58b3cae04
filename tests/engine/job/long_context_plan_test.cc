// Planning long context (issue 14, point 5): 7B-class models at 512K tokens on one H200's device
// budget, and the longest sequence that fits a pair of budgets, found by searching the planner.
#include <gtest/gtest.h>

#include "engine/job/job.h"

namespace mt {
namespace {

constexpr uint64_t kH200 = uint64_t(139) << 30;  // 139 GiB: what a job gets of an H200
constexpr uint64_t kHost = uint64_t(1500) * 1000 * 1000 * 1000;  // 1.5 TB

JobSpec long_spec(const char* preset, int seq_len) {
  JobSpec s;
  s.model.preset = preset;
  s.train.seq_len = seq_len;
  s.train.micro_batch = 1;
  s.train.global_batch = 1;
  s.train.layout = MemoryLayout::kCompact;
  s.precision = "bf16";
  s.backend = "cuda";
  return s;
}

uint64_t kind(const std::vector<std::pair<std::string, uint64_t>>& kinds, const std::string& k) {
  for (const auto& [name, bytes] : kinds)
    if (name == k) return bytes;
  return 0;
}

TEST(LongContext, SevenAndEightBillionAt512kFitOneH200InBf16) {
  for (const char* preset : {"qwen2.5-7b", "llama3-8b"}) {
    const JobSpec spec = long_spec(preset, 524288);
    auto cfg = resolve_model(spec);
    ASSERT_TRUE(cfg.ok());
    auto plan = plan_for_job(spec, *cfg, kHost, kH200);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    EXPECT_TRUE(plan->fits) << preset << ": " << plan->reason;
    EXPECT_LE(plan->device_bytes, kH200) << preset;
    // The layer inputs (L x 512K x C in bf16) cannot stay on the device; the MLP runs in chunks.
    EXPECT_FALSE(plan->checkpoints_on_device) << preset;
    EXPECT_GT(kind(plan->host_by_kind, "checkpoints"), uint64_t(64) << 30) << preset;
    EXPECT_GT(plan->token_chunk, 0) << preset;
    EXPECT_LT(plan->token_chunk, 524288) << preset;
    // Unchunked, the same run would not fit.
    JobSpec whole = spec;
    whole.train.token_chunk = 524288;
    auto unchunked = plan_for_job(whole, *cfg, kHost, kH200);
    ASSERT_TRUE(unchunked.ok());
    EXPECT_FALSE(unchunked->fits) << preset;
  }
}

TEST(LongContext, LongestSeqLenIsTheLongestThatFits) {
  const JobSpec spec = long_spec("llama3-70b", 4096);
  auto cfg = resolve_model(spec);
  ASSERT_TRUE(cfg.ok());
  auto longest = longest_seq_len(spec, *cfg, kHost, kH200);
  ASSERT_TRUE(longest.ok()) << longest.status().to_string();
  EXPECT_GT(*longest, 65536);
  for (int T : {*longest, *longest + 1}) {
    JobSpec s = spec;
    s.train.seq_len = T;
    auto plan = plan_for_job(s, *cfg, kHost, kH200);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(plan->fits, T == *longest) << "seq_len " << T << ": " << plan->reason;
  }
  // A budget nothing fits: refused, not zero.
  auto none = longest_seq_len(spec, *cfg, uint64_t(1) << 30, kH200);
  EXPECT_EQ(none.status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace mt

// The tiny preset learns the synthetic source down to its known entropy floor.
#include <gtest/gtest.h>

#include "engine/exec/resident_executor.h"

namespace mt {
namespace {

TEST(TrainTiny, ReachesSyntheticEntropyFloor) {
  auto cfg = preset_config("tiny");
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  TrainOptions opt;
  opt.seq_len = 64;
  opt.micro_batch = 8;
  opt.global_batch = 16;
  opt.optimizer.lr = 3e-3f;
  opt.optimizer.weight_decay = 0.0f;
  opt.schedule = {10, LrDecay::kCosine, 0.1f, 300};
  auto ex = ResidentExecutor::create(*cfg, opt);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  init_weights(*cfg, (*ex)->store(), 1);
  auto src = make_synthetic_source({7, cfg->vocab_size, 64, 4});
  ASSERT_TRUE(src.ok());
  const double floor = (*src)->entropy_floor();
  ASSERT_GT(floor, 0.5);
  Batch b;
  double first = 0, last = 0;
  for (long s = 0; s < opt.schedule.total_steps; ++s) {
    ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, b).ok());
    auto st = (*ex)->step(b);
    ASSERT_TRUE(st.ok()) << st.status().to_string();
    if (s == 0) first = st->loss;
    last = st->loss;
  }
  // Held-out evaluation on fresh sequences.
  ASSERT_TRUE((*src)->next_batch(64, opt.seq_len, b).ok());
  auto eval = (*ex)->mean_loss(b);
  ASSERT_TRUE(eval.ok());
  EXPECT_GT(first, 5.0);  // ~ln(256) at init
  EXPECT_LT(*eval, floor + 0.1) << "floor " << floor << " last train loss " << last;
  EXPECT_GT(*eval, floor - 0.1);  // cannot beat the entropy of the source by much
}

}  // namespace
}  // namespace mt

// Held-out evaluation (Executor::evaluate): the streaming executor's forward-only pass between
// steps equals the resident reference bit for bit on the CPU backend, leaves the training
// trajectory and the device peak untouched, and refuses batches it cannot evaluate.
#include <gtest/gtest.h>

#include <cstring>
#include <ostream>

#include "engine/exec/data_parallel_executor.h"
#include "engine/exec/resident_executor.h"
#include "engine/exec/streaming_executor.h"
#include "tests/engine/test_model.h"

namespace mt {
namespace {

ModelConfig eval_config(bool tied, bool qwen = false) {
  return testing_util::test_model_config({qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM", 32, 3, 4, 2, 48, 64, tied});
}

TrainOptions eval_options(int global_batch = 6) {
  TrainOptions o;
  o.seq_len = 24;
  o.micro_batch = 2;
  o.global_batch = global_batch;
  o.optimizer.lr = 3e-3f;
  o.optimizer.grad_clip = 0.5f;
  return o;
}

// `rows` held-out sequences from their own source: masked targets, and documents when asked.
Batch held_out(int rows, int seq_len, bool documents) {
  auto src = make_synthetic_source({77, 64, 32, 3});
  Batch b;
  EXPECT_TRUE((*src)->next_batch(rows, seq_len, b).ok());
  b.targets[3] = b.targets[30] = -1;
  if (documents) mark_documents(b, b.inputs[5]);
  return b;
}

void expect_same_masters(const HostStore& a, const HostStore& b) {
  for (size_t u = 0; u < a.num_units(); ++u)
    EXPECT_EQ(0, std::memcmp(a.unit(u).master, b.unit(u).master, a.unit(u).numel * sizeof(float))) << "unit " << u;
}

struct Case {
  const char* name;
  bool tied, qwen;
  int slots;
  CheckpointPlacement placement;
  Precision precision = Precision::kFp32;
  Bf16Uploads uploads = Bf16Uploads::kShadow;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class StreamingEvaluation : public ::testing::TestWithParam<Case> {};

TEST_P(StreamingEvaluation, EqualsResidentBitForBitBetweenStepsAndChangesNothing) {
  const Case& c = GetParam();
  const ModelConfig cfg = eval_config(c.tied, c.qwen);
  TrainOptions opt = eval_options();
  opt.precision = c.precision;
  auto res = ResidentExecutor::create(cfg, opt);
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  StreamingOptions so;
  so.slots = c.slots;
  so.placement = c.placement;
  so.bf16_uploads = c.uploads;
  auto str = StreamingExecutor::create_cpu(cfg, opt, so);
  ASSERT_TRUE(str.ok()) << str.status().to_string();
  init_weights(cfg, (*res)->store(), 3);
  init_weights(cfg, (*str)->store(), 3);
  auto train = make_synthetic_source({5, cfg.vocab_size, 32, 3});
  const Batch full = held_out(6, opt.seq_len, false), docs = held_out(6, opt.seq_len, true);
  const Batch one = held_out(2, opt.seq_len, false);  // one micro-batch: fewer rows than a step
  double first = 0;
  Batch b;
  for (int s = 0; s <= 3; ++s) {
    if (s > 0) {  // a step between evaluations: the next uploads refill what the evaluation used
      ASSERT_TRUE((*train)->next_batch(opt.global_batch, opt.seq_len, b).ok());
      auto r1 = (*res)->step(b);
      auto r2 = (*str)->step(b);
      ASSERT_TRUE(r1.ok() && r2.ok()) << r2.status().to_string();
      ASSERT_EQ(r1->loss, r2->loss) << "step " << s << ": the evaluation changed the trajectory";
    }
    for (const Batch* e : {&full, &docs, &one}) {
      auto want = (*res)->evaluate(*e);
      const uint64_t peak = (*str)->device_peak();
      auto got = (*str)->evaluate(*e);
      ASSERT_TRUE(want.ok()) << want.status().to_string();
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      EXPECT_EQ(want->loss_sum, got->loss_sum) << "after step " << s;  // exact
      EXPECT_EQ(want->counted, got->counted);
      EXPECT_EQ(got->counted, e->counted_targets());
      EXPECT_EQ(got->tokens, long(e->inputs.size()));
      EXPECT_GT(got->h2d_bytes, uint64_t(cfg.num_params() - int64_t(cfg.vocab_size) * cfg.hidden_size) *
                                     compute_elem_bytes(c.precision));  // every unit but the embedding's unread rows
      EXPECT_EQ((*str)->device_peak(), peak) << "the evaluation allocated device memory";
    }
    // What the number means: the mean loss per counted target, as one sequence at a time gives
    // it (another grouping of the same sums: equal to rounding).
    auto mean = (*res)->mean_loss(full);
    ASSERT_TRUE(mean.ok());
    auto got = (*str)->evaluate(full);
    ASSERT_TRUE(got.ok());
    EXPECT_NEAR(got->loss(), *mean, 1e-5 * *mean);
    if (s == 0) first = got->loss();
    if (s == 3) {
      EXPECT_LT(got->loss(), first) << "three steps on the same chain lower the held-out loss";
    }
  }
  ASSERT_TRUE((*str)->sync().ok());
  expect_same_masters((*res)->store(), (*str)->store());
  EXPECT_LE((*str)->device_peak(), (*str)->plan().device_bytes);
}

INSTANTIATE_TEST_SUITE_P(
    Cpu, StreamingEvaluation,
    ::testing::Values(Case{"untied_k2_device", false, false, 2, CheckpointPlacement::kDevice},
                      Case{"tied_k2_host", true, false, 2, CheckpointPlacement::kHost},
                      Case{"qwen_tied_k3_device", true, true, 3, CheckpointPlacement::kDevice},
                      Case{"untied_k3_host", false, false, 3, CheckpointPlacement::kHost},
                      Case{"Bf16_tied_k2_device", true, false, 2, CheckpointPlacement::kDevice, Precision::kBf16},
                      Case{"Bf16_convert_untied_k2_host", false, false, 2, CheckpointPlacement::kHost,
                           Precision::kBf16, Bf16Uploads::kConvert}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(StreamingEvaluation, RefusesBatchesItCannotEvaluate) {
  const ModelConfig cfg = eval_config(false);
  const TrainOptions opt = eval_options();
  auto ex = StreamingExecutor::create_cpu(cfg, opt, {});
  ASSERT_TRUE(ex.ok());
  init_weights(cfg, (*ex)->store(), 1);
  EXPECT_EQ((*ex)->eval_batch_rows(), 6);
  const Batch too_many = held_out(8, opt.seq_len, false), odd = held_out(3, opt.seq_len, false);
  const Batch short_rows = held_out(2, opt.seq_len - 1, false);
  Batch bad_token = held_out(2, opt.seq_len, false);
  bad_token.inputs[7] = cfg.vocab_size;
  for (const Batch* b : {&too_many, &odd, &short_rows, static_cast<const Batch*>(&bad_token)}) {
    auto r = (*ex)->evaluate(*b);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << b->num_seqs << "x" << b->seq_len;
  }
  auto ok = (*ex)->evaluate(held_out(4, opt.seq_len, false));  // and it still evaluates
  EXPECT_TRUE(ok.ok()) << ok.status().to_string();
}

TEST(StreamingEvaluation, NonFiniteWeightsFailTheEvaluationByName) {
  const ModelConfig cfg = eval_config(false);
  auto ex = StreamingExecutor::create_cpu(cfg, eval_options(), {});
  ASSERT_TRUE(ex.ok());
  init_weights(cfg, (*ex)->store(), 1);
  (*ex)->store().unit(2).master[0] = std::numeric_limits<float>::infinity();
  auto r = (*ex)->evaluate(held_out(2, 24, false));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("evaluation loss is not finite"), std::string::npos) << r.status().message();
}

// devices: 2 evaluates on device 0 alone, with device 0's share of the batch as its bound; the
// weights are the one store's, so it equals the resident devices: 2 reference bit for bit.
TEST(DataParallelEvaluation, DeviceZeroEvaluatesTheSharedStore) {
  const ModelConfig cfg = eval_config(true);
  const TrainOptions opt = eval_options(8);
  std::vector<std::unique_ptr<Backend>> backends;
  for (int d = 0; d < 2; ++d) backends.push_back(make_cpu_backend({}));
  auto dp = DataParallelExecutor::create(cfg, opt, {}, std::move(backends));
  auto res = ResidentExecutor::create(cfg, opt, 2);
  ASSERT_TRUE(dp.ok() && res.ok()) << dp.status().to_string();
  init_weights(cfg, (*dp)->store(), 9);
  init_weights(cfg, (*res)->store(), 9);
  EXPECT_EQ((*dp)->eval_batch_rows(), 4);
  auto src = make_synthetic_source({5, cfg.vocab_size, 32, 3});
  const Batch e = held_out(4, opt.seq_len, true);
  Batch b;
  for (int s = 0; s < 2; ++s) {
    ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, b).ok());
    ASSERT_TRUE((*dp)->step(b).ok() && (*res)->step(b).ok());
    auto got = (*dp)->evaluate(e);
    auto want = (*res)->evaluate(e);
    ASSERT_TRUE(got.ok() && want.ok()) << got.status().to_string();
    EXPECT_EQ(got->loss_sum, want->loss_sum) << "after step " << s + 1;
  }
}

}  // namespace
}  // namespace mt

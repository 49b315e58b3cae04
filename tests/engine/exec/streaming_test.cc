// The streaming executor against the resident reference: bit for bit on the CPU backend, in a
// bounded device arena, in the compact layout, and its refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <set>

#include "engine/exec/resident_executor.h"
#include "engine/exec/streaming_executor.h"
#include "engine/exec/streaming_pipeline.h"
#include "tests/engine/model/family_fixture.h"
#include "tests/engine/test_model.h"

namespace mt {
namespace {

ModelConfig small_config(bool tied, int layers, bool qwen = false) {
  return testing_util::test_model_config(
      {qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM", 32, layers, 4, 2, 48, 64, tied});
}

TrainOptions small_options() {
  TrainOptions o;
  o.seq_len = 24;
  o.micro_batch = 2;
  o.global_batch = 6;  // three micro-batches accumulate
  o.optimizer.lr = 3e-3f;
  o.optimizer.grad_clip = 0.5f;  // active: early gradients are larger than this
  o.schedule = {2, LrDecay::kCosine, 0.1f, 4};
  return o;
}

void expect_same_state(const HostStore& a, const HostStore& b) {
  ASSERT_EQ(a.num_units(), b.num_units());
  for (size_t u = 0; u < a.num_units(); ++u) {
    const size_t bytes = a.unit(u).numel * sizeof(float);
    EXPECT_EQ(0, std::memcmp(a.unit(u).master, b.unit(u).master, bytes)) << "master of unit " << u;
    EXPECT_EQ(0, std::memcmp(a.unit(u).m, b.unit(u).m, bytes)) << "adam m of unit " << u;
    EXPECT_EQ(0, std::memcmp(a.unit(u).v, b.unit(u).v, bytes)) << "adam v of unit " << u;
    if (a.unit(u).shadow && b.unit(u).shadow) {  // convert uploads keep none
      EXPECT_EQ(0, std::memcmp(a.unit(u).shadow, b.unit(u).shadow, a.unit(u).numel * sizeof(bf16)))
          << "bf16 shadow of unit " << u;
    }
  }
}

struct Case {
  const char* name;
  bool tied, qwen;
  int slots;
  CheckpointPlacement placement;
  bool sync_compute = false;  // the CPU backend's debugging mode; default: an asynchronous compute stream
  Precision precision = Precision::kFp32;
  Bf16Uploads uploads = Bf16Uploads::kShadow;
  int token_chunk = 0;  // MLP block in chunks of this many tokens (48 per micro-batch here)
  const char* family = nullptr;  // a family fixture's config (tests/fixtures/families), `tied` as it says
};
// Printed by name, so ctest's test names are stable (not the struct's bytes).
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class StreamingVsResident : public ::testing::TestWithParam<Case> {};

TEST_P(StreamingVsResident, BitForBitOverSeveralSteps) {
  const Case& c = GetParam();
  const ModelConfig cfg = c.family ? testing_util::family_config(c.family) : small_config(c.tied, 4, c.qwen);
  ASSERT_EQ(cfg.tie_word_embeddings, c.tied);
  TrainOptions opt = small_options();
  opt.precision = c.precision;
  opt.token_chunk = c.token_chunk;
  auto res = ResidentExecutor::create(cfg, opt);
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  StreamingOptions so;
  so.slots = c.slots;
  so.placement = c.placement;
  so.bf16_uploads = c.uploads;
  CpuBackendOptions bo;
  bo.sync_compute = c.sync_compute;
  auto str = StreamingExecutor::create(cfg, opt, so, make_cpu_backend(bo));
  ASSERT_TRUE(str.ok()) << str.status().to_string();
  EXPECT_EQ((*str)->plan().checkpoints_on_device, c.placement != CheckpointPlacement::kHost);
  init_weights(cfg, (*res)->store(), 3);
  init_weights(cfg, (*str)->store(), 3);
  auto src = make_synthetic_source({5, cfg.vocab_size, 32, 3});
  Batch b;
  bool clipped = false;
  for (int s = 0; s < 4; ++s) {
    ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, b).ok());
    if (s == 1) b.targets[5] = b.targets[17] = -1;  // masked positions
    auto r1 = (*res)->step(b);
    auto r2 = (*str)->step(b);
    ASSERT_TRUE(r1.ok() && r2.ok());
    EXPECT_EQ(r1->loss, r2->loss) << "step " << s;  // exact equality
    // Each step reports its own gradient norm, clipping and learning rate: the resident
    // executor's, bit for bit (the streaming one once reported the previous step's norm).
    EXPECT_EQ(r1->grad_norm, r2->grad_norm) << "step " << s;
    EXPECT_GT(r2->grad_norm, 0.0) << "step " << s;
    EXPECT_EQ(r1->clipped, r2->clipped) << "step " << s;
    EXPECT_EQ(r2->clipped, r2->grad_norm > opt.optimizer.grad_clip) << "step " << s;
    EXPECT_EQ(r1->lr, r2->lr) << "step " << s;
    // The forward fetches only the batch's embedding rows, then every other unit once; a tied
    // head reads the whole embedding again. The embedding's gradient comes back as those rows.
    // Weights cross the link in the compute dtype; gradients come back in fp32.
    const uint64_t elem = compute_elem_bytes(c.precision);
    const uint64_t row_bytes = uint64_t(cfg.hidden_size) * elem;
    const uint64_t rows = std::set<int32_t>(b.inputs.begin(), b.inputs.end()).size();
    ASSERT_EQ(uint64_t(r2->embedding_rows), rows);
    ASSERT_LT(rows, uint64_t(cfg.vocab_size)) << "the batch must leave rows untouched";
    const uint64_t emb_bytes = uint64_t(cfg.vocab_size) * row_bytes;
    EXPECT_EQ(r2->forward_h2d_bytes,
              uint64_t(cfg.num_params()) * elem - emb_bytes + rows * row_bytes + (c.tied ? emb_bytes : 0));
    EXPECT_EQ(r2->last_grad_bytes, rows * uint64_t(cfg.hidden_size) * sizeof(float));
    EXPECT_GT(r2->forward_compute_seconds, 0.0);
    EXPECT_LT(r2->forward_compute_seconds, r2->compute_seconds);
    clipped |= r1->grad_norm > opt.optimizer.grad_clip;
  }
  EXPECT_TRUE(clipped) << "the test must exercise clipping";
  ASSERT_TRUE((*str)->sync().ok());
  expect_same_state((*res)->store(), (*str)->store());
}

INSTANTIATE_TEST_SUITE_P(
    Cpu, StreamingVsResident,
    ::testing::Values(Case{"untied_k2_device", false, false, 2, CheckpointPlacement::kDevice},
                      Case{"tied_k2_device", true, false, 2, CheckpointPlacement::kDevice},
                      Case{"untied_k3_host", false, false, 3, CheckpointPlacement::kHost},
                      Case{"tied_k3_host", true, false, 3, CheckpointPlacement::kHost},
                      Case{"tied_k2_host", true, false, 2, CheckpointPlacement::kHost},
                      Case{"qwen_untied_k3_device", false, true, 3, CheckpointPlacement::kDevice},
                      Case{"tied_k3_host_sync_compute", true, false, 3, CheckpointPlacement::kHost, true},
                      Case{"untied_k2_device_sync_compute", false, false, 2, CheckpointPlacement::kDevice, true},
                      // Mixed precision: bf16 weights (the AdamW's shadow), activations and layer
                      // inputs, fp32 gradients; the same bits as the resident bf16 reference.
                      Case{"Bf16_untied_k2_device", false, false, 2, CheckpointPlacement::kDevice, false, Precision::kBf16},
                      Case{"Bf16_tied_k3_host", true, false, 3, CheckpointPlacement::kHost, false, Precision::kBf16},
                      Case{"Bf16_qwen_tied_k2_host", true, true, 2, CheckpointPlacement::kHost, false, Precision::kBf16},
                      Case{"Bf16_untied_k3_device_sync_compute", false, false, 3, CheckpointPlacement::kDevice, true,
                           Precision::kBf16},
                      // The uploader rounds the masters itself (no shadow): the same bits.
                      Case{"Bf16_convert_tied_k2_host", true, false, 2, CheckpointPlacement::kHost, false,
                           Precision::kBf16, Bf16Uploads::kConvert},
                      Case{"Bf16_convert_untied_k3_device", false, false, 3, CheckpointPlacement::kDevice, false,
                           Precision::kBf16, Bf16Uploads::kConvert},
                      // The MLP block in chunks of 7 tokens (48 a micro-batch: the last chunk is short).
                      Case{"Chunk7_untied_k2_device", false, false, 2, CheckpointPlacement::kDevice, false,
                           Precision::kFp32, Bf16Uploads::kShadow, 7},
                      Case{"Bf16_Chunk7_qwen_tied_k3_host", true, true, 3, CheckpointPlacement::kHost, false,
                           Precision::kBf16, Bf16Uploads::kShadow, 7},
                      // The families' variants (their fixture configs, sliding windows of 4 keys).
                      Case{"qwen3_k2_device", true, false, 2, CheckpointPlacement::kDevice, false, Precision::kFp32,
                           Bf16Uploads::kShadow, 0, "qwen3"},
                      Case{"olmo2_Chunk7_k3_host", false, false, 3, CheckpointPlacement::kHost, false,
                           Precision::kFp32, Bf16Uploads::kShadow, 7, "olmo2"},
                      Case{"gemma3_k2_host", true, false, 2, CheckpointPlacement::kHost, false, Precision::kFp32,
                           Bf16Uploads::kShadow, 0, "gemma3"},
                      Case{"Bf16_Chunk7_gemma3_k3_device", true, false, 3, CheckpointPlacement::kDevice, false,
                           Precision::kBf16, Bf16Uploads::kShadow, 7, "gemma3"},
                      Case{"phi3_k3_device", false, false, 3, CheckpointPlacement::kDevice, false, Precision::kFp32,
                           Bf16Uploads::kShadow, 0, "phi3"},
                      Case{"gemma2_Chunk7_k2_device", true, false, 2, CheckpointPlacement::kDevice, false,
                           Precision::kFp32, Bf16Uploads::kShadow, 7, "gemma2"},
                      Case{"Bf16_mistral_k2_host", false, false, 2, CheckpointPlacement::kHost, false,
                           Precision::kBf16, Bf16Uploads::kShadow, 0, "mistral"}),
    [](const auto& info) { return std::string(info.param.name); });

// Forward 0..L fetches every unit; the head follows; the backward runs L..1, reusing what the
// last K slots still hold and never fetching the embedding (its backward reads no weights).
// What a step reports of its update, checked independently: the gradient norm is the norm of
// the gradients the step left in the host store (summed here serially, in double), `clipped`
// says whether it exceeded grad_clip, and the learning rate follows warmup then cosine decay
// (computed here from the schedule's definition) at every step.
TEST(StreamingStepReport, NormIsTheStepsGradientsAndLrFollowsTheSchedule) {
  const ModelConfig cfg = small_config(false, 2);
  TrainOptions opt = small_options();
  opt.schedule = {2, LrDecay::kCosine, 0.1f, 6};
  auto ex = StreamingExecutor::create_cpu(cfg, opt, StreamingOptions{});
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  init_weights(cfg, (*ex)->store(), 4);
  auto src = make_synthetic_source({6, cfg.vocab_size, 32, 3});
  Batch b;
  bool clipped = false;
  for (long step = 1; step <= 6; ++step) {
    ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, b).ok());
    auto st = (*ex)->step(b);
    ASSERT_TRUE(st.ok()) << st.status().to_string();
    ASSERT_TRUE((*ex)->sync().ok());
    double sumsq = 0;
    const HostStore& hs = (*ex)->store();
    for (size_t u = 0; u < hs.num_units(); ++u)
      for (size_t i = 0; i < hs.unit(u).numel; ++i) {
        const double g = static_cast<const float*>(hs.unit(u).grad)[i];
        sumsq += g * g;
      }
    EXPECT_NEAR(st->grad_norm, std::sqrt(sumsq), 1e-9 * std::sqrt(sumsq)) << "step " << step;
    EXPECT_EQ(st->clipped, st->grad_norm > opt.optimizer.grad_clip) << "step " << step;
    clipped |= st->clipped;
    const long k = step - 1;  // the schedule's 0-based step
    const double progress = k < 2 ? 0 : double(k - 2) / 4.0;
    const double want = k < 2 ? 3e-3 * double(k + 1) / 2 : 3e-3 * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * progress)));
    EXPECT_NEAR(st->lr, want, 1e-9) << "step " << step;
  }
  EXPECT_TRUE(clipped) << "some step must clip";
}

TEST(StreamingUseSequence, ForwardFetchesEveryUnitBackwardReusesSlotsAndSkipsTheEmbedding) {
  const int L = 5;
  for (bool tied : {false, true})
    for (int K : {2, 3}) {
      const auto uses = build_use_sequence(L, K, tied);
      const int head_uses = tied ? 2 : 1;
      ASSERT_EQ(int(uses.size()), (L + 1) + head_uses + L) << "tied " << tied << " K " << K;
      std::vector<int> slot_unit(size_t(K), -1);
      int backward_fetches = 0;
      for (int i = 0; i < int(uses.size()); ++i) {
        const UnitUse& u = uses[size_t(i)];
        const int expected_unit = i <= L ? i : i < L + 1 + head_uses ? (tied && i == L + 1 ? 0 : L + 1)
                                                                      : L - (i - (L + 1 + head_uses));
        EXPECT_EQ(u.unit, expected_unit) << "use " << i;
        ASSERT_GE(u.slot, 0);
        ASSERT_LT(u.slot, K);
        EXPECT_EQ(u.fetch, slot_unit[size_t(u.slot)] != u.unit) << "use " << i << ": fetch iff not resident";
        if (i <= L) {
          EXPECT_TRUE(u.fetch) << "forward use " << i;
        }
        if (i > L + head_uses) backward_fetches += u.fetch;
        slot_unit[size_t(u.slot)] = u.unit;
      }
      // After the head, the K slots hold the head (and the embedding when tied) plus the last
      // decoder layers; exactly those are reused.
      EXPECT_EQ(backward_fetches, L - (K - head_uses)) << "tied " << tied << " K " << K;
    }
}

TEST(StreamingArena, EightLayersTrainInAnArenaSmallerThanTheModel) {
  const ModelConfig cfg = small_config(false, 8);
  TrainOptions opt = small_options();
  opt.optimizer.grad_clip = 1.0f;
  opt.schedule = {0, LrDecay::kConstant, 1.0f, 30};
  PlanOptions po;
  po.slots = 2;
  po.placement = CheckpointPlacement::kHost;
  auto plan = plan_memory(cfg, opt, po);
  ASSERT_TRUE(plan.ok());
  const uint64_t weight_bytes = uint64_t(cfg.num_params()) * 4;
  const uint64_t layer_bytes = build_param_schemas(cfg)[1].numel * 4;
  // The arena cannot hold more than K (=2) layers' weights beyond the checkpoints and workspace.
  const uint64_t non_weight = plan->device_bytes - plan->device_by_kind[0].second;
  EXPECT_LT(plan->device_bytes, non_weight + 3 * std::max<uint64_t>(layer_bytes, plan->slot_numel * 4));
  EXPECT_LT(plan->device_bytes, weight_bytes + non_weight);

  StreamingOptions so;
  so.placement = CheckpointPlacement::kHost;
  so.device_budget = plan->device_bytes;
  auto ex = StreamingExecutor::create_cpu(cfg, opt, so);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  init_weights(cfg, (*ex)->store(), 1);
  auto src = make_synthetic_source({2, cfg.vocab_size, 16, 2});
  Batch b;
  double first = 0, last = 0;
  for (int s = 0; s < 30; ++s) {
    ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, b).ok());
    auto st = (*ex)->step(b);
    ASSERT_TRUE(st.ok()) << st.status().to_string();
    (s == 0 ? first : last) = st->loss;
    EXPECT_LE(st->device_peak_bytes, plan->device_bytes);
  }
  EXPECT_LT(last, first - 0.5);
  EXPECT_LE((*ex)->device_peak(), (*ex)->plan().device_bytes);
  EXPECT_GT((*ex)->device_peak(), (*ex)->plan().device_bytes * 9 / 10);  // the plan is not padded
}

TEST(StreamingArena, OverBudgetIsRefusedBeforeAllocatingWithTheNumbers) {
  const ModelConfig cfg = small_config(false, 8);
  StreamingOptions so;
  so.device_budget = 10000;
  auto ex = StreamingExecutor::create_cpu(cfg, small_options(), so);
  ASSERT_FALSE(ex.ok());
  EXPECT_EQ(ex.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(ex.status().message().find("device memory"), std::string::npos) << ex.status().message();
  EXPECT_NE(ex.status().message().find("10000"), std::string::npos) << ex.status().message();
}

TEST(StreamingOptionsRefusal, UpdateDuringBackwardNeedsNoClipping) {
  StreamingOptions so;
  so.update_during_backward = true;
  auto ex = StreamingExecutor::create_cpu(small_config(false, 2), small_options(), so);
  ASSERT_FALSE(ex.ok());
  EXPECT_NE(ex.status().message().find("grad_clip"), std::string::npos);
}

// Without clipping each unit's update depends only on its own gradient, so updating it the
// moment that gradient lands must give the resident executor's bits exactly.
TEST(StreamingUpdateDuringBackward, EqualsResidentBitForBitWithoutClipping) {
  for (bool tied : {false, true}) {
    const ModelConfig cfg = small_config(tied, 3);
    TrainOptions opt = small_options();
    opt.optimizer.grad_clip = 0;
    auto res = ResidentExecutor::create(cfg, opt);
    ASSERT_TRUE(res.ok()) << res.status().to_string();
    StreamingOptions so;
    so.update_during_backward = true;
    auto str = StreamingExecutor::create_cpu(cfg, opt, so);
    ASSERT_TRUE(str.ok()) << str.status().to_string();
    init_weights(cfg, (*res)->store(), 4);
    init_weights(cfg, (*str)->store(), 4);
    auto src = make_synthetic_source({6, cfg.vocab_size, 32, 3});
    Batch b;
    for (int s = 0; s < 4; ++s) {
      ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, b).ok());
      auto r1 = (*res)->step(b);
      auto r2 = (*str)->step(b);
      ASSERT_TRUE(r1.ok() && r2.ok());
      EXPECT_EQ(r1->loss, r2->loss) << "tied " << tied << " step " << s;
      EXPECT_EQ(r1->grad_norm, r2->grad_norm) << "the norm is reported without clipping too, step " << s;
      EXPECT_GT(r2->grad_norm, 0.0);
      EXPECT_FALSE(r2->clipped);
    }
    ASSERT_TRUE((*str)->sync().ok());
    expect_same_state((*res)->store(), (*str)->store());
  }
}

// Compact (bf16 moments and gradients) against exact (fp32) on the tiny preset. bf16 keeps 8
// mantissa bits, so each gradient and moment carries ~0.4% relative rounding; AdamW normalises
// by sqrt(v), so the update direction is barely changed and the two runs should end within a
// few hundredths of a nat of each other. We allow 0.05 nats/token.
TEST(StreamingCompact, TinyTrainsToWithinToleranceOfExact) {
  auto cfg = preset_config("tiny");
  ASSERT_TRUE(cfg.ok());
  TrainOptions opt;
  opt.seq_len = 32;
  opt.micro_batch = 8;
  opt.global_batch = 8;
  opt.optimizer.lr = 3e-3f;
  opt.optimizer.weight_decay = 0;
  opt.schedule = {5, LrDecay::kCosine, 0.1f, 60};
  double final_loss[2];
  for (int layout = 0; layout < 2; ++layout) {
    opt.layout = layout == 0 ? MemoryLayout::kExact : MemoryLayout::kCompact;
    auto ex = StreamingExecutor::create_cpu(*cfg, opt, {});
    ASSERT_TRUE(ex.ok()) << ex.status().to_string();
    init_weights(*cfg, (*ex)->store(), 1);
    auto src = make_synthetic_source({7, cfg->vocab_size, 64, 4});
    Batch b;
    for (int s = 0; s < 60; ++s) {
      ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, b).ok());
      auto st = (*ex)->step(b);
      ASSERT_TRUE(st.ok());
      final_loss[layout] = st->loss;
    }
  }
  std::printf("exact final loss %.5f, compact %.5f\n", final_loss[0], final_loss[1]);
  EXPECT_LT(final_loss[0], 4.0);  // it trained
  EXPECT_NEAR(final_loss[1], final_loss[0], 0.05);
}

}  // namespace
}  // namespace mt

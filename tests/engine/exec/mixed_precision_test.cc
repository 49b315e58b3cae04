// Mixed precision on the whole model: bf16 loss and gradients against fp32 on the same
// (bf16-representable) weights, and a bf16 training run against an fp32 one, then exported in
// bf16 and loaded back. Per-op bounds are in tests/engine/backend/bf16_ops_test.cc; streaming
// equals resident bit for bit in bf16 in streaming_test.cc (the Bf16_* cases).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/exec/model_pass.h"
#include "engine/exec/resident_executor.h"
#include "engine/io/hf_io.h"
#include "engine/model/init.h"
#include "tests/engine/temp_dir.h"
#include "tests/engine/test_model.h"

namespace mt {
namespace {

struct PassResult {
  double loss = 0;
  std::vector<std::vector<float>> grads;  // per unit (tied: the head's share added)
};

// One micro-batch forward and backward through model_pass in dtype T, on weights given in
// fp32 (converted exactly: they are bf16-representable).
template <typename T>
PassResult run_pass(const ModelConfig& cfg, const std::vector<std::vector<float>>& w, const std::vector<int32_t>& in,
                    const std::vector<int32_t>& tgt, int B, int T_) {
  const auto units = build_param_schemas(cfg);
  std::vector<std::vector<T>> wt(units.size());
  PassResult r;
  r.grads.resize(units.size());
  ModelPassArgs<T> a;
  for (size_t u = 0; u < units.size(); ++u) {
    for (float x : w[u]) wt[u].push_back(from_float<T>(x));
    r.grads[u].assign(units[u].numel, 0.0f);
    a.weights.push_back(wt[u].data());
    a.grads.push_back(r.grads[u].data());
  }
  std::vector<float> tied(cfg.tie_word_embeddings ? units[0].numel : 0, 0.0f);
  a.tied_head_grad = tied.empty() ? nullptr : tied.data();
  a.inputs = in.data();
  a.targets = tgt.data();
  a.grad_scale = 1.0f / float(in.size());
  a.recompute = true;
  const auto inv = rope_inv_freq(cfg);
  LayerShape s{&cfg, B, T_, inv.data(), 5};
  Workspace ws(model_pass_workspace_bytes<T>(s, true));
  auto res = model_pass(cpu_ops<T>(), s, a, ws.data(), ws.bytes());
  EXPECT_TRUE(res.ok()) << res.status().to_string();
  if (!res.ok()) return r;
  r.loss = res->loss_sum / double(res->counted);
  for (size_t i = 0; i < tied.size(); ++i) r.grads[0][i] += tied[i];
  return r;
}

double rel_l2(const std::vector<float>& got, const std::vector<float>& ref) {
  double d = 0, n = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    d += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    n += double(ref[i]) * ref[i];
  }
  return std::sqrt(d / std::max(n, 1e-300));
}

// bf16 rounds each activation to 8 significant bits (relative error <= 2^-8, ~2^-10 rms); about
// 15 roundings per layer and direction compound, so the loss moves by well under 1% and each
// unit's gradient by a few percent (rms). Bounds: loss 1%, gradient rel. L2 error 5% per unit,
// with every gradient finite. fp32 itself is the reference here (its own error is ~1e-6).
TEST(MixedPrecision, ModelLossAndGradientsTrackFp32) {
  for (bool tied : {false, true}) {
    const ModelConfig cfg = testing_util::test_model_config({"Qwen2ForCausalLM", 64, 3, 4, 2, 96, 97, tied});
    const auto units = build_param_schemas(cfg);
    std::vector<std::vector<float>> w(units.size());
    for (size_t u = 0; u < units.size(); ++u) {
      w[u].resize(units[u].numel);
      init_unit_weights(cfg, units[u], w[u].data(), 11);
      for (float& x : w[u]) x = bf16_to_float(float_to_bf16(x));  // both dtypes see the same weights
    }
    const int B = 2, T = 19;
    std::mt19937 rng(3);
    std::vector<int32_t> in(size_t(B * T)), tgt(size_t(B * T));
    for (int i = 0; i < B * T; ++i) in[size_t(i)] = int32_t(rng() % 97), tgt[size_t(i)] = int32_t(rng() % 97);
    const PassResult f = run_pass<float>(cfg, w, in, tgt, B, T);
    const PassResult h = run_pass<bf16>(cfg, w, in, tgt, B, T);
    ASSERT_GT(f.loss, 1.0);
    EXPECT_LT(std::abs(h.loss - f.loss), 0.01 * f.loss) << "tied " << tied << ": bf16 " << h.loss << " fp32 " << f.loss;
    for (size_t u = 0; u < units.size(); ++u) {
      const double e = rel_l2(h.grads[u], f.grads[u]);
      EXPECT_TRUE(e < 0.05) << "tied " << tied << " unit " << u << ": gradient rel. L2 error " << e;
    }
  }
}

TrainOptions tiny_options(Precision p) {
  TrainOptions o;
  o.seq_len = 32;
  o.micro_batch = 4;
  o.global_batch = 8;  // two micro-batches accumulate
  o.optimizer.lr = 3e-3f;
  o.optimizer.weight_decay = 0.0f;
  o.optimizer.grad_clip = 1.0f;
  o.schedule = {10, LrDecay::kCosine, 0.1f, 200};
  o.precision = p;
  return o;
}

// Trains `tiny` for 200 steps; returns the mean loss of the last 10 steps.
double train_tiny(ResidentExecutor& ex, const ModelConfig& cfg, const TrainOptions& o) {
  init_weights(cfg, ex.store(), 1);
  auto src = make_synthetic_source({7, cfg.vocab_size, 64, 4});
  EXPECT_TRUE(src.ok());
  Batch b;
  double tail = 0;
  for (long s = 0; s < o.schedule.total_steps; ++s) {
    EXPECT_TRUE((*src)->next_batch(o.global_batch, o.seq_len, b).ok());
    auto st = ex.step(b);
    EXPECT_TRUE(st.ok()) << st.status().to_string();
    if (!st.ok()) return 0;
    if (s >= o.schedule.total_steps - 10) tail += st->loss / 10;
  }
  return tail;
}

TEST(MixedPrecision, TinyTrainsInBf16LikeFp32AndItsBf16ExportLoadsBack) {
  auto cfg = preset_config("tiny");
  ASSERT_TRUE(cfg.ok());
  auto f32 = ResidentExecutor::create(*cfg, tiny_options(Precision::kFp32));
  auto b16 = ResidentExecutor::create(*cfg, tiny_options(Precision::kBf16));
  ASSERT_TRUE(f32.ok() && b16.ok());
  const double lf = train_tiny(**f32, *cfg, tiny_options(Precision::kFp32));
  const double lb = train_tiny(**b16, *cfg, tiny_options(Precision::kBf16));
  ASSERT_LT(lf, 2.0) << "the fp32 run must have learned (ln 256 = 5.5 at init)";
  EXPECT_LT(std::abs(lb - lf), 0.02 * lf) << "bf16 " << lb << " fp32 " << lf;

  // Exported in bf16 (the shadow's bits: round(master)) and loaded into a fresh bf16 model, it
  // evaluates to exactly the trained model's loss.
  testing_util::TempDir dir;
  const std::string out = dir / "hf";
  ASSERT_TRUE(export_hf_model(out, *cfg, (*b16)->store(), true, 0).ok());
  auto loaded = ResidentExecutor::create(*cfg, tiny_options(Precision::kBf16));
  ASSERT_TRUE(loaded.ok());
  ASSERT_TRUE(load_hf_weights(out, *cfg, (*loaded)->store()).ok());
  auto src = make_synthetic_source({7, cfg->vocab_size, 64, 4});  // the language it learned
  Batch held_out;
  ASSERT_TRUE((*src)->next_batch(16, 32, held_out).ok());
  auto e1 = (*b16)->mean_loss(held_out), e2 = (*loaded)->mean_loss(held_out);
  ASSERT_TRUE(e1.ok() && e2.ok());
  EXPECT_EQ(*e1, *e2);
  EXPECT_LT(*e2, 2.0);
}

}  // namespace
}  // namespace mt

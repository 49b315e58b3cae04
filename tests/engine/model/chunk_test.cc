// A decoder's token-wise work (norm1 + QKV projection, the MLP block) in token chunks
// (LayerShape::token_chunk, issue 14): the same loss and gradients as the whole micro-batch at
// once, and a planner that chunks to fit a device budget.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/exec/model_pass.h"
#include "engine/exec/planner.h"
#include "engine/exec/streaming_executor.h"
#include "engine/model/init.h"
#include "tests/engine/test_model.h"

namespace mt {
namespace {

struct Pass {
  double loss = 0;
  std::vector<std::vector<acc_t<float>>> grads;
};

template <typename T>
Pass run(const ModelConfig& cfg, const std::vector<std::vector<T>>& w, int B, int T_, int chunk, bool recompute) {
  const auto units = build_param_schemas(cfg);
  Pass r;
  r.grads.resize(units.size());
  ModelPassArgs<T> a;
  for (size_t u = 0; u < units.size(); ++u) {
    r.grads[u].assign(units[u].numel, 0.0f);
    a.weights.push_back(w[u].data());
    a.grads.push_back(r.grads[u].data());
  }
  std::vector<float> tied(cfg.tie_word_embeddings ? units[0].numel : 0, 0.0f);
  a.tied_head_grad = tied.empty() ? nullptr : tied.data();
  std::mt19937 rng(5);
  std::vector<int32_t> in(size_t(B * T_)), tgt(size_t(B * T_));
  for (int i = 0; i < B * T_; ++i) in[size_t(i)] = int32_t(rng() % 61), tgt[size_t(i)] = int32_t(rng() % 61);
  a.inputs = in.data();
  a.targets = tgt.data();
  a.grad_scale = 1.0f / float(B * T_);
  a.recompute = recompute;
  const auto inv = rope_inv_freq(cfg);
  LayerShape s{&cfg, B, T_, inv.data(), 256, chunk};
  Workspace ws(model_pass_workspace_bytes<T>(s, recompute));
  auto res = model_pass(cpu_ops<T>(), s, a, ws.data(), ws.bytes());
  EXPECT_TRUE(res.ok()) << res.status().to_string();
  r.loss = res.ok() ? res->loss_sum : 0;
  return r;
}

// A chunk's GEMMs have fewer rows, and BLAS may then sum a row's K products in another order
// (OpenBLAS picks kernels by shape), so forward values agree to fp32 summation order: the loss
// within 1e-6 relative (observed: equal, or a last-bit difference). The QKV and MLP weight
// gradients sum chunk by chunk instead of in one GEMM: relative L2 error below 1e-5 (observed
// ~1e-7). In bf16 the same sums are fp32 and the activations are rounded alike: the same bounds.
template <typename T>
void expect_chunked_equals_unchunked(bool recompute) {
  const ModelConfig cfg = testing_util::test_model_config({"Qwen2ForCausalLM", 48, 2, 4, 2, 80, 61, true});
  const auto units = build_param_schemas(cfg);
  std::vector<std::vector<T>> w(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    std::vector<float> f(units[u].numel);
    init_unit_weights(cfg, units[u], f.data(), 4);
    for (float x : f) w[u].push_back(from_float<T>(x));
  }
  const int B = 2, T_ = 19;  // 38 tokens: chunks of 5 leave a chunk of 3
  const Pass whole = run<T>(cfg, w, B, T_, 0, recompute);
  for (int chunk : {1, 5, 37}) {
    const Pass part = run<T>(cfg, w, B, T_, chunk, recompute);
    EXPECT_TRUE(std::abs(part.loss - whole.loss) <= 1e-6 * std::abs(whole.loss))
        << "chunk " << chunk << ": " << part.loss << " vs " << whole.loss;
    for (size_t u = 0; u < units.size(); ++u) {
      double d = 0, n = 0;
      for (size_t i = 0; i < whole.grads[u].size(); ++i) {
        d += std::pow(double(part.grads[u][i]) - whole.grads[u][i], 2);
        n += std::pow(double(whole.grads[u][i]), 2);
      }
      ASSERT_GT(n, 0.0);
      EXPECT_TRUE(std::sqrt(d / n) < 1e-5) << "chunk " << chunk << " unit " << u << ": " << std::sqrt(d / n);
    }
  }
}

TEST(Chunk, TokenWiseWorkInChunksEqualsTheWholeMicroBatchFp32) { expect_chunked_equals_unchunked<float>(true); }
TEST(Chunk, TokenWiseWorkInChunksEqualsTheWholeMicroBatchFp32WithoutRecompute) { expect_chunked_equals_unchunked<float>(false); }
TEST(Chunk, TokenWiseWorkInChunksEqualsTheWholeMicroBatchBf16) { expect_chunked_equals_unchunked<bf16>(true); }

// A device budget between the chunked and the unchunked workspace: the planner picks a chunk,
// the executor runs it, and the measured peak stays inside the plan.
TEST(Chunk, PlannerChunksToFitTheDeviceBudget) {
  const ModelConfig cfg = testing_util::test_model_config({"LlamaForCausalLM", 32, 2, 4, 2, 512, 64, false});
  TrainOptions opt;
  opt.seq_len = 256;
  opt.micro_batch = 2;
  opt.global_batch = 2;
  PlanOptions po;
  po.placement = CheckpointPlacement::kDevice;
  auto whole = plan_memory(cfg, opt, po);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->token_chunk, 0);
  po.device_budget = whole->device_bytes - 1;  // one byte short
  auto fit = plan_memory(cfg, opt, po);
  ASSERT_TRUE(fit.ok());
  ASSERT_TRUE(fit->fits) << fit->reason;
  EXPECT_EQ(fit->token_chunk, 256) << "the largest power of two below 512 tokens";
  po.device_budget = whole->device_bytes - whole->workspace_bytes / 2;
  auto tighter = plan_memory(cfg, opt, po);
  ASSERT_TRUE(tighter.ok() && tighter->fits) << tighter->reason;
  EXPECT_LT(tighter->token_chunk, 256);
  EXPECT_GE(tighter->token_chunk, kMinTokenChunk);

  StreamingOptions so;
  so.placement = CheckpointPlacement::kDevice;
  so.device_budget = po.device_budget;
  auto ex = StreamingExecutor::create_cpu(cfg, opt, so);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  EXPECT_EQ((*ex)->plan().token_chunk, tighter->token_chunk);
  init_weights(cfg, (*ex)->store(), 1);
  auto src = make_synthetic_source({1, cfg.vocab_size, 32, 2});
  Batch b;
  ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, b).ok());
  auto st = (*ex)->step(b);
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  EXPECT_LE((*ex)->device_peak(), tighter->device_bytes);
  EXPECT_LE(tighter->device_bytes, po.device_budget);
}

}  // namespace
}  // namespace mt

// Packed documents through the whole model: a micro-batch whose rows hold several documents
// gives the loss and gradients of those documents run as separate sequences (fp32; the bound is
// stated below), and the streaming executor reproduces the resident one bit for bit with packed
// documents in its batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/data/data_source.h"
#include "engine/exec/model_pass.h"
#include "engine/exec/resident_executor.h"
#include "engine/exec/streaming_executor.h"
#include "tests/engine/test_model.h"

namespace mt {
namespace {

struct Doc {
  int b, start, len;
};

// Row 0: a document of length 1 in the middle and one at the last token; row 1: one document.
constexpr int kB = 2, kT = 80;
const std::vector<std::vector<int>> kRows = {{30, 1, 48, 1}, {80}};

TEST(VarlenModel, PackedDocumentsEqualSeparateSequencesLossAndGradients) {
  const ModelConfig cfg = testing_util::test_model_config({"Qwen2ForCausalLM", 32, 2, 4, 2, 48, 64});
  const auto units = build_param_schemas(cfg);
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 0.3f);
  std::vector<std::vector<float>> w(units.size()), g_packed(units.size()), g_alone(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    w[u].resize(units[u].numel);
    for (auto& x : w[u]) x = nd(rng);
    g_packed[u].assign(units[u].numel, 0.0f);
    g_alone[u].assign(units[u].numel, 0.0f);
  }
  std::vector<int32_t> inputs(size_t(kB) * kT), targets(size_t(kB) * kT), pos;
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i] = int32_t(rng() % 64);
    targets[i] = i % 7 == 2 ? -1 : int32_t(rng() % 64);
  }
  std::vector<Doc> docs;
  for (int b = 0; b < kB; ++b) {
    int t = 0;
    for (int len : kRows[size_t(b)]) {
      docs.push_back({b, t, len});
      for (int i = 0; i < len; ++i) pos.push_back(i);
      t += len;
    }
  }
  const auto inv = rope_inv_freq(cfg);
  auto run = [&](int B, int T, const int32_t* p, size_t offset, std::vector<std::vector<float>>& grads) {
    LayerShape s{&cfg, B, T, inv.data(), 7};
    s.pos = p;
    Workspace ws(model_pass_workspace_bytes<float>(s, true));
    ModelPassArgs<float> a;
    for (size_t u = 0; u < units.size(); ++u) {
      a.weights.push_back(w[u].data());
      a.grads.push_back(grads[u].data());
    }
    a.inputs = inputs.data() + offset;
    a.targets = targets.data() + offset;
    a.recompute = true;
    auto r = model_pass(cpu_ops<float>(), s, a, ws.data(), ws.bytes());
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? r->loss_sum : 0.0;
  };
  const double packed = run(kB, kT, pos.data(), 0, g_packed);
  double alone = 0;
  for (const Doc& d : docs) alone += run(1, d.len, nullptr, size_t(d.b) * kT + size_t(d.start), g_alone);
  // fp32 bound: only summation order differs (attention tiles, the head's chunks, GEMM blocks);
  // 1e-5 relative on a sum of ~140 token losses, and for each gradient element 1e-4 of the
  // largest gradient magnitude of its unit (the sums run over all 160 tokens).
  EXPECT_NEAR(packed, alone, 1e-5 * std::abs(alone));
  for (size_t u = 0; u < units.size(); ++u) {
    float scale = 0;
    for (float x : g_alone[u]) scale = std::max(scale, std::abs(x));
    ASSERT_GT(scale, 0.0f) << "unit " << u;
    for (size_t i = 0; i < g_alone[u].size(); ++i)
      ASSERT_NEAR(g_packed[u][i], g_alone[u][i], 1e-4 * scale) << "unit " << u << " element " << i;
  }
  // Positions matter: the same rows as single documents give another loss.
  std::vector<std::vector<float>> scratch = g_alone;
  EXPECT_GT(std::abs(run(kB, kT, nullptr, 0, scratch) - packed), 1e-3 * std::abs(packed));
}

struct Case {
  const char* name;
  Precision precision;
  CheckpointPlacement placement;
  int token_chunk = 0;  // MLP token chunks (issue 14 point 1) next to the documents
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class VarlenStreamingVsResident : public ::testing::TestWithParam<Case> {};

TEST_P(VarlenStreamingVsResident, BitForBitWithPackedDocuments) {
  const Case& c = GetParam();
  const ModelConfig cfg = testing_util::test_model_config({"LlamaForCausalLM", 32, 3, 4, 2, 48, 64});
  TrainOptions opt;
  opt.seq_len = 40;
  opt.micro_batch = 2;
  opt.global_batch = 6;
  opt.optimizer.lr = 3e-3f;
  opt.precision = c.precision;
  opt.token_chunk = c.token_chunk;
  auto res = ResidentExecutor::create(cfg, opt);
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  StreamingOptions so;
  so.placement = c.placement;
  auto str = StreamingExecutor::create(cfg, opt, so, make_cpu_backend({}));
  ASSERT_TRUE(str.ok()) << str.status().to_string();
  init_weights(cfg, (*res)->store(), 3);
  init_weights(cfg, (*str)->store(), 3);
  auto synth = make_synthetic_source({5, cfg.vocab_size, 12, 3});
  ASSERT_TRUE(synth.ok());
  auto src = with_documents(std::move(synth).value(), 4, cfg.vocab_size);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  Batch b;
  for (int s = 0; s < 3; ++s) {
    ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, b).ok());
    const long restarts = std::count(b.positions.begin(), b.positions.end(), 0);
    ASSERT_GT(restarts, opt.global_batch + 3) << "the batch must hold documents inside its rows";
    auto r1 = (*res)->step(b);
    auto r2 = (*str)->step(b);
    ASSERT_TRUE(r1.ok() && r2.ok());
    EXPECT_EQ(r1->loss, r2->loss) << "step " << s;
  }
  // The documents are in effect on the streaming side too: the same batch as whole rows differs.
  Batch whole = b;
  whole.positions.clear();
  auto r3 = (*str)->step(whole);
  auto r4 = (*res)->step(b);
  ASSERT_TRUE(r3.ok() && r4.ok());
  EXPECT_NE(r3->loss, r4->loss);
}

INSTANTIATE_TEST_SUITE_P(Cpu, VarlenStreamingVsResident,
                         ::testing::Values(Case{"fp32_device", Precision::kFp32, CheckpointPlacement::kDevice},
                                           Case{"fp32_host", Precision::kFp32, CheckpointPlacement::kHost},
                                           Case{"bf16_device", Precision::kBf16, CheckpointPlacement::kDevice},
                                           Case{"fp32_host_chunked", Precision::kFp32, CheckpointPlacement::kHost, 7}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace mt

// Whole-model gradient check in double: the analytic gradient of the mean loss of a tiny
// model (every unit, every tensor) against central finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <random>

#include "engine/exec/model_pass.h"
#include "tests/engine/model/family_fixture.h"
#include "tests/engine/model/moe_fixture.h"
#include "tests/engine/test_model.h"

namespace mt {
namespace {

struct Case {
  const char* name;
  const char* arch;
  bool tied;
  int heads, kv_heads, T;
  const char* family = nullptr;  // a family fixture's config (tests/fixtures/families) instead
  bool packed = false;           // documents of 5, 4 and the rest per row
  const char* moe = nullptr;     // a mixture-of-experts fixture's config (tests/fixtures/moe)
};
// Printed by name, so ctest's test names are stable (not the struct's bytes).
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

ModelConfig make_config(const Case& c) {
  if (c.moe) {
    auto m = load_model_config(testing_util::moe_fixture_dir(c.moe));
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return m.ok() ? m.value() : ModelConfig{};
  }
  if (c.family) return testing_util::family_config(c.family);
  return testing_util::test_model_config({c.arch, 16, 2, c.heads, c.kv_heads, 24, 11, c.tied, 4, 100.0});
}

class GradCheckModel : public ::testing::TestWithParam<Case> {};

TEST_P(GradCheckModel, MatchesFiniteDifferences) {
  const Case& c = GetParam();
  const ModelConfig cfg = make_config(c);
  const auto units = build_param_schemas(cfg);
  const int B = 2, T = c.T;
  std::mt19937 rng(42);
  std::normal_distribution<double> nd(0.0, 0.4);
  std::vector<std::vector<double>> w(units.size()), g(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    w[u].resize(units[u].numel);
    g[u].assign(units[u].numel, 0.0);
    for (auto& x : w[u]) x = nd(rng);
  }
  const uint32_t V = uint32_t(cfg.vocab_size);
  std::vector<int32_t> inputs(size_t(B * T)), targets(size_t(B * T)), pos(size_t(B * T));
  for (int i = 0; i < B * T; ++i) {
    inputs[size_t(i)] = int32_t(rng() % V);
    targets[size_t(i)] = (i % 5 == 3) ? -1 : int32_t(rng() % V);  // some positions masked
    const int t = i % T;
    pos[size_t(i)] = t < 5 ? t : t < 9 ? t - 5 : t - 9;
  }
  auto inv_freq_f = rope_inv_freq(cfg);
  LayerShape s{&cfg, B, T, inv_freq_f.data(), 3};  // head chunk 3 does not divide B*T
  if (c.packed) s.pos = pos.data();
  std::vector<double> tied(cfg.tie_word_embeddings ? units[0].numel : 0, 0.0);
  Workspace ws(model_pass_workspace_bytes<double>(s, true));

  ModelPassArgs<double> a;
  for (size_t u = 0; u < units.size(); ++u) a.weights.push_back(w[u].data());
  a.inputs = inputs.data();
  a.targets = targets.data();
  a.recompute = true;  // the workspace holds one layer's activations
  // The objective: the mean loss, plus a mixture of experts' load-balancing loss times its
  // coefficient (its routing is piecewise constant: the difference quotient sees its smooth part).
  double aux = 0;
  a.aux_loss = &aux;
  auto loss_of = [&]() {
    aux = 0;
    auto r = model_pass(cpu_ops<double>(), s, a, ws.data(), ws.bytes());
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? r->loss_sum / double(r->counted) + cfg.moe.aux_coef * aux : 0.0;
  };
  long counted = 0;
  for (int32_t t : targets) counted += t >= 0;
  ModelPassArgs<double> b = a;
  for (size_t u = 0; u < units.size(); ++u) b.grads.push_back(g[u].data());
  b.tied_head_grad = tied.empty() ? nullptr : tied.data();
  b.grad_scale = 1.0 / double(counted);
  ASSERT_TRUE(model_pass(cpu_ops<double>(), s, b, ws.data(), ws.bytes()).ok());
  for (size_t i = 0; i < tied.size(); ++i) g[0][i] += tied[i];

  const double h = 1e-5;
  int checked = 0;
  for (size_t u = 0; u < units.size(); ++u)
    for (const auto& t : units[u].tensors)
      for (size_t k = 0; k < std::min<size_t>(t.numel, 6); ++k) {
        const size_t i = t.offset + (k * 7919) % t.numel;
        const double orig = w[u][i];
        w[u][i] = orig + h;
        const double lp = loss_of();
        w[u][i] = orig - h;
        const double lm = loss_of();
        w[u][i] = orig;
        const double num = (lp - lm) / (2 * h), ana = g[u][i];
        EXPECT_NEAR(ana, num, 1e-6 + 1e-5 * std::abs(num)) << t.name << "[" << (i - t.offset) << "]";
        ++checked;
      }
  EXPECT_GT(checked, 40);
}

INSTANTIATE_TEST_SUITE_P(
    Tiny, GradCheckModel,
    ::testing::Values(Case{"llama_gqa_untied", "LlamaForCausalLM", false, 4, 2, 7},
                      Case{"llama_mha_tied", "LlamaForCausalLM", true, 2, 2, 5},
                      Case{"qwen_bias_gqa_tied", "Qwen2ForCausalLM", true, 4, 1, 9},
                      Case{"qwen_bias_untied_long", "Qwen2ForCausalLM", false, 2, 1, 67},
                      // The families' variants (their fixture configs: sliding windows of 4 keys
                      // in a sequence of 13, q/k norms, post-norms, 1 + w, GeGLU, local RoPE).
                      Case{"qwen3_packed", nullptr, true, 0, 0, 13, "qwen3", true},
                      Case{"olmo2", nullptr, false, 0, 0, 13, "olmo2"},
                      Case{"gemma3_packed", nullptr, true, 0, 0, 13, "gemma3", true},
                      Case{"gemma2_softcaps_packed", nullptr, true, 0, 0, 13, "gemma2", true},
                      Case{"phi3", nullptr, false, 0, 0, 13, "phi3"},
                      Case{"mistral_packed", nullptr, false, 0, 0, 13, "mistral", true},
                      // Mixtures of experts (their fixture configs: the router, the experts, the
                      // shared expert and its gate, sinks, the clamped SwiGLU, the aux loss).
                      Case{"mixtral_moe", nullptr, false, 0, 0, 13, nullptr, false, "mixtral"},
                      Case{"qwen2_moe_shared", nullptr, false, 0, 0, 13, nullptr, true, "qwen2_moe"},
                      Case{"qwen3_moe_tied", nullptr, true, 0, 0, 13, nullptr, false, "qwen3_moe"},
                      Case{"gpt_oss_sinks", nullptr, false, 0, 0, 13, nullptr, true, "gpt_oss"}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace mt

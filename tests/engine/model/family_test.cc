// The model families against transformers: each family's fixture (a tiny random model with its
// variants on, a batch with packed documents, transformers' loss and gradients) through our
// model pass on the CPU reference; the same weights exported and read back; options we do not
// implement refused by name; the real shapes' presets.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "engine/base/host_memory.h"
#include "engine/exec/model_pass.h"
#include "engine/io/hf_io.h"
#include "engine/io/safetensors.h"
#include "engine/model/param_schema.h"
#include "tests/engine/model/family_fixture.h"
#include "tests/engine/temp_dir.h"

namespace mt {
namespace {

using testing_util::family_batch;
using testing_util::family_config;
using testing_util::family_fixture_dir;

std::unique_ptr<SafetensorsFile> open_or_die(const std::string& path) {
  auto f = SafetensorsFile::open(path);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  return f.ok() ? std::move(f.value()) : nullptr;
}

// Every tensor of every unit, read from `file` by its Hugging Face name.
std::vector<std::vector<float>> read_units(const SafetensorsFile& file, const std::vector<ParamSchema>& units) {
  std::vector<std::vector<float>> out(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    out[u].assign(units[u].numel, 0.f);
    for (const TensorSpec& t : units[u].tensors) {
      const TensorInfo* info = file.find(t.name);
      EXPECT_NE(info, nullptr) << t.name << " is not in " << file.path();
      if (!info) continue;
      EXPECT_EQ(info->shape, t.shape) << t.name;
      EXPECT_TRUE(file.read_f32(*info, out[u].data() + t.offset).ok()) << t.name;
    }
  }
  return out;
}

std::set<std::string> schema_names(const std::vector<ParamSchema>& units) {
  std::set<std::string> names;
  for (const auto& u : units)
    for (const auto& t : u.tensors) names.insert(t.name);
  return names;
}

std::set<std::string> file_names(const SafetensorsFile& f) {
  std::set<std::string> names;
  for (const auto& t : f.tensors()) names.insert(t.name);
  return names;
}

struct PassResult {
  double loss = 0;
  long counted = 0;
  std::vector<std::vector<float>> grads;  // per unit; a tied head's share added to the embedding's
};

// One forward and backward of the fixture's batch through model_pass in dtype T (weights given
// in fp32; bf16 rounds them).
template <typename T = float>
PassResult run_pass(const ModelConfig& cfg, const std::vector<std::vector<float>>& w,
                    const testing_util::FamilyBatch& b, bool recompute, int token_chunk) {
  const auto units = build_param_schemas(cfg);
  const auto inv = rope_inv_freq(cfg);
  LayerShape s{&cfg, b.B, b.T, inv.data(), 5, token_chunk};  // head chunk 5 does not divide B*T
  s.pos = b.pos.data();
  PassResult r;
  r.grads.resize(units.size());
  std::vector<std::vector<T>> wt(units.size());
  ModelPassArgs<T> a;
  for (size_t u = 0; u < units.size(); ++u) {
    for (float x : w[u]) wt[u].push_back(from_float<T>(x));
    a.weights.push_back(wt[u].data());
    r.grads[u].assign(units[u].numel, 0.f);
    a.grads.push_back(r.grads[u].data());
  }
  std::vector<float> tied(cfg.tie_word_embeddings ? units[0].numel : 0, 0.f);
  a.tied_head_grad = tied.empty() ? nullptr : tied.data();
  a.inputs = b.tokens.data();
  a.targets = b.targets.data();
  a.grad_scale = 1.f / float(b.count);
  a.recompute = recompute;
  Workspace ws(model_pass_workspace_bytes<T>(s, recompute));
  auto res = model_pass(cpu_ops<T>(), s, a, ws.data(), ws.bytes());
  EXPECT_TRUE(res.ok()) << res.status().to_string();
  if (!res.ok()) return r;
  for (size_t i = 0; i < tied.size(); ++i) r.grads[0][i] += tied[i];
  r.counted = res->counted;
  r.loss = res->loss_sum / double(res->counted);
  return r;
}

// A family's fixture read once: its config, weights, transformers' gradients and batch.
struct Fixture {
  explicit Fixture(const std::string& family)
      : cfg(family_config(family)), units(build_param_schemas(cfg)),
        weights(open_or_die(family_fixture_dir(family) + "/model.safetensors")),
        expected(open_or_die(family_fixture_dir(family) + "/grads.safetensors")), batch(family_batch(family)) {
    if (weights && expected) w = read_units(*weights, units), ref = read_units(*expected, units);
  }
  ModelConfig cfg;
  std::vector<ParamSchema> units;
  std::unique_ptr<SafetensorsFile> weights, expected;
  std::vector<std::vector<float>> w, ref;
  testing_util::FamilyBatch batch;
};

class FamilyParity : public ::testing::TestWithParam<std::string> {};

// fp32 against transformers' fp32: the loss within 1e-5 relative. Each gradient within 1e-4 of
// its tensor's largest entry (plus 1e-7): both sides sum in fp32 in different orders (a GEMM's
// K-loop, attention's online softmax against torch's two-pass one), which moves entries by a
// few ulps of the tensor's scale times sqrt of the terms summed (here < 200: ~1e-6 relative);
// 1e-4 leaves two orders of margin and still fails any wrong formula, which moves gradients by
// percents. Checked unchunked with saved activations and chunked (5 tokens) with recompute.
TEST_P(FamilyParity, LossAndEveryGradientEqualTransformers) {
  const std::string family = GetParam();
  const Fixture f(family);
  ASSERT_TRUE(f.weights && f.expected);
  const ModelConfig& cfg = f.cfg;
  const auto& units = f.units;
  // every tensor transformers saved is one we train (nothing read and then ignored)
  std::set<std::string> saved = file_names(*f.weights);
  if (cfg.tie_word_embeddings) saved.erase("lm_head.weight");
  EXPECT_EQ(saved, schema_names(units));
  const auto& w = f.w;
  const auto& ref = f.ref;
  const auto& b = f.batch;
  for (const auto& [recompute, chunk] : {std::pair{false, 0}, std::pair{true, 5}}) {
    SCOPED_TRACE(recompute ? "recompute, token chunks of 5" : "saved activations");
    const PassResult r = run_pass(cfg, w, b, recompute, chunk);
    EXPECT_EQ(r.counted, b.count);
    EXPECT_NEAR(r.loss, b.loss, 1e-5 * b.loss);
    for (size_t u = 0; u < units.size(); ++u)
      for (const TensorSpec& t : units[u].tensors) {
        const float* g = r.grads[u].data() + t.offset;
        const float* e = ref[u].data() + t.offset;
        float scale = 0, worst = 0;
        for (size_t i = 0; i < t.numel; ++i) scale = std::max(scale, std::abs(e[i]));
        for (size_t i = 0; i < t.numel; ++i) worst = std::max(worst, std::abs(g[i] - e[i]));
        EXPECT_GT(scale, 0.f) << t.name << ": the fixture must give every tensor a gradient";
        EXPECT_LE(worst, 1e-4f * scale + 1e-7f) << t.name << " (largest |gradient| " << scale << ")";
      }
  }
}

double rel_l2(const float* got, const float* ref, size_t n) {
  double d = 0, r = 0;
  for (size_t i = 0; i < n; ++i) d += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]), r += double(ref[i]) * ref[i];
  return std::sqrt(d / std::max(r, 1e-300));
}

// bf16 (weights rounded, activations rounded at every op: docs/ARCHITECTURE.md) against
// transformers' fp32, within the bounds tests/engine/exec/mixed_precision_test.cc derives for
// bf16 against fp32: the loss within 1%, each unit's gradient within 5% relative L2.
TEST_P(FamilyParity, Bf16TracksTransformersFp32) {
  const std::string family = GetParam();
  const Fixture f(family);
  ASSERT_TRUE(f.weights && f.expected);
  const ModelConfig& cfg = f.cfg;
  const auto& units = f.units;
  const auto& w = f.w;
  const auto& ref = f.ref;
  const auto& b = f.batch;
  const PassResult r = run_pass<bf16>(cfg, w, b, true, 0);
  EXPECT_LT(std::abs(r.loss - b.loss), 0.01 * b.loss) << "bf16 " << r.loss << ", transformers fp32 " << b.loss;
  for (size_t u = 0; u < units.size(); ++u) {
    const double e = rel_l2(r.grads[u].data(), ref[u].data(), units[u].numel);
    EXPECT_LT(e, 0.05) << unit_kind_name(units[u].kind) << " " << units[u].layer << ": gradient rel. L2 error " << e;
  }
}

// The weights as transformers named them go in and come out under the same names and bits; the
// exported config.json reads back as the same model.
TEST_P(FamilyParity, ExportWritesTheTensorsTransformersSaved) {
  const std::string family = GetParam();
  const ModelConfig cfg = family_config(family);
  auto store = HostStore::create(build_param_schemas(cfg), MemoryLayout::kExact, false, default_host_allocator());
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  ASSERT_TRUE(load_hf_weights(family_fixture_dir(family), cfg, **store).ok());
  testing_util::TempDir out("mt-family");
  ASSERT_TRUE(export_hf_model(out / "model", cfg, **store, false, 0).ok());
  auto original = open_or_die(family_fixture_dir(family) + "/model.safetensors");
  auto exported = open_or_die(out / "model/model.safetensors");
  ASSERT_TRUE(original && exported);
  std::set<std::string> names = file_names(*original);
  if (cfg.tie_word_embeddings) names.erase("lm_head.weight");
  EXPECT_EQ(file_names(*exported), names);
  for (const std::string& n : names) {
    const TensorInfo* a = original->find(n);
    const TensorInfo* e = exported->find(n);
    ASSERT_TRUE(a && e) << n;
    EXPECT_EQ(a->shape, e->shape) << n;
    std::vector<float> x(a->numel()), y(e->numel());
    ASSERT_TRUE(original->read_f32(*a, x.data()).ok() && exported->read_f32(*e, y.data()).ok());
    EXPECT_EQ(x, y) << n;
  }
  auto again = load_model_config(out / "model");
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->architecture, cfg.architecture);
  EXPECT_EQ(again->layers, cfg.layers);
  EXPECT_EQ(again->qk_norm, cfg.qk_norm);
  EXPECT_EQ(again->norm_placement, cfg.norm_placement);
  EXPECT_EQ(again->head_dim, cfg.head_dim);
  EXPECT_EQ(again->rope_local_theta, cfg.rope_local_theta);
  EXPECT_EQ(rope_inv_freq(*again), rope_inv_freq(cfg));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FamilyParity, ::testing::ValuesIn(testing_util::family_fixtures()),
                         [](const auto& info) { return info.param; });

// What each fixture's config turns on, read from transformers' own keys.
TEST(FamilyVariants, FixturesDeriveTheirVariants) {
  const ModelConfig q = family_config("qwen3");
  EXPECT_EQ(q.qk_norm, QkNorm::kPerHead);
  EXPECT_EQ(q.head_dim, 12);
  EXPECT_NE(q.head_dim * q.num_heads, q.hidden_size);
  EXPECT_EQ(q.layer_attention(0).window, 0);
  EXPECT_EQ(q.layer_attention(1).window, 4);  // layer_types: full, sliding
  const ModelConfig o = family_config("olmo2");
  EXPECT_EQ(o.norm_placement, NormPlacement::kPost);
  EXPECT_EQ(o.qk_norm, QkNorm::kWhole);
  EXPECT_EQ(o.q_norm_width(), o.q_dim());
  const ModelConfig g = family_config("gemma3");
  EXPECT_EQ(g.norm_placement, NormPlacement::kPreAndPost);
  EXPECT_EQ(g.norm_offset, 1.f);
  EXPECT_EQ(g.activation, GateActivation::kGeluTanh);
  EXPECT_DOUBLE_EQ(g.embedding_scale, std::sqrt(32.0));
  EXPECT_DOUBLE_EQ(g.attention_scale, 1.0 / std::sqrt(20.0));
  EXPECT_EQ(g.rope_local_theta, 1000.0);
  EXPECT_EQ(g.rope_scaling.type, "linear");
  EXPECT_EQ(g.layer_attention(0), (LayerAttention{4, true}));
  EXPECT_EQ(g.layer_attention(1), (LayerAttention{0, false}));
  EXPECT_EQ(rope_inv_freq(g).size(), size_t(g.head_dim));  // global then local table
  const ModelConfig p = family_config("phi3");
  EXPECT_TRUE(p.fused_projections);
  EXPECT_NE(build_param_schemas(p)[1].find("model.layers.0.self_attn.qkv_proj.weight"), nullptr);
  EXPECT_NE(build_param_schemas(p)[1].find("model.layers.0.mlp.gate_up_proj.weight"), nullptr);
  EXPECT_EQ(family_config("mistral").layer_attention(1).window, 4);
  const ModelConfig g2 = family_config("gemma2");
  EXPECT_EQ(g2.attention_softcap, 2.0);
  EXPECT_EQ(g2.final_softcap, 3.0);
  EXPECT_EQ(g2.qk_norm, QkNorm::kNone);
  EXPECT_EQ(g2.layer_attention(0), (LayerAttention{4, false}));  // the even layers slide
  EXPECT_EQ(g2.layer_attention(1), (LayerAttention{0, false}));
  // transformers' Gemma 2 caps by default: a config without the keys has them on
  Json j = Json::parse(read_file(family_fixture_dir("gemma2") + "/config.json").value()).value();
  std::erase_if(j.members(), [](const auto& kv) {
    return kv.first == "attn_logit_softcapping" || kv.first == "final_logit_softcapping" || kv.first == "layer_types";
  });
  auto d = parse_model_config(j.dump(), "gemma2 without caps");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->attention_softcap, 50.0);
  EXPECT_EQ(d->final_softcap, 30.0);
  EXPECT_EQ(d->layer_attention(2).window, 4);
}

// A config with an option we do not implement fails naming the field.
TEST(FamilyVariants, UnimplementedOptionsAreRefusedByName) {
  struct Case {
    const char* family;
    const char* key;
    const char* value;
    const char* named;
  };
  const Case cases[] = {
      {"gemma3", "attn_logit_softcapping", "-50.0", "attn_logit_softcapping"},
      {"gemma2", "final_logit_softcapping", R"("30")", "final_logit_softcapping"},
      {"qwen3", "final_logit_softcapping", "30.0", "final_logit_softcapping"},  // another family's option
      {"gemma3", "use_bidirectional_attention", "true", "use_bidirectional_attention"},
      {"gemma3", "rope_parameters", R"({"full_attention": {"rope_type": "longrope", "factor": 2.0}})",
       "rope_parameters.full_attention.rope_type"},
      {"gemma3", "layer_types", R"(["sliding_attention", "chunked_attention", "full_attention"])", "layer_types[1]"},
      {"gemma3", "hidden_activation", R"("gelu")", "hidden_activation"},
      {"qwen3", "attention_bias", "true", "attention_bias"},
      {"qwen3", "rope_parameters", R"({"rope_type": "dynamic", "factor": 2.0})", "rope_parameters.rope_type"},
      {"olmo2", "clip_qkv", "8.0", "clip_qkv"},
      {"olmo2", "sliding_window", "16", "sliding_window"},
      {"phi3", "resid_pdrop", "0.1", "resid_pdrop"},
      {"phi3", "rope_parameters", R"({"rope_type": "default", "rope_theta": 1.0, "partial_rotary_factor": 0.75})",
       "rope_parameters.partial_rotary_factor"},
      {"mistral", "a_new_option", "1", "a_new_option"},
  };
  for (const Case& c : cases) {
    auto text = read_file(family_fixture_dir(c.family) + "/config.json");
    ASSERT_TRUE(text.ok());
    auto j = Json::parse(text.value());
    ASSERT_TRUE(j.ok());
    auto v = Json::parse(c.value);
    ASSERT_TRUE(v.ok()) << c.value;
    j->set(c.key, v.value());
    auto r = parse_model_config(j->dump(), c.family);
    ASSERT_FALSE(r.ok()) << c.family << " " << c.key << " = " << c.value << " was accepted";
    EXPECT_NE(r.status().message().find(std::string("'") + c.named + "'"), std::string::npos)
        << r.status().to_string();
  }
}

// The real shapes: each preset loads with its family's variants (from the published config.json).
TEST(FamilyPresets, RealShapesLoadWithTheirVariants) {
  struct Case {
    const char* preset;
    const char* architecture;
    double billions_lo, billions_hi;
  };
  const Case cases[] = {
      {"qwen3-0.6b", "Qwen3ForCausalLM", 0.55, 0.65},   {"qwen3-8b", "Qwen3ForCausalLM", 8.0, 8.4},
      {"qwen3-32b", "Qwen3ForCausalLM", 32.5, 33.0},    {"gemma-3-1b", "Gemma3ForCausalLM", 0.95, 1.05},
      {"gemma-3-27b", "Gemma3ForCausalLM", 26.5, 27.5}, {"phi-4", "Phi3ForCausalLM", 14.5, 14.9},
      {"olmo-2-13b", "Olmo2ForCausalLM", 13.5, 13.9},   {"mistral-nemo", "MistralForCausalLM", 12.0, 12.5},
      {"llama3.2-1b", "LlamaForCausalLM", 1.2, 1.3},     {"llama3.2-3b", "LlamaForCausalLM", 3.1, 3.3},
      {"gemma-2-9b", "Gemma2ForCausalLM", 9.1, 9.3},
  };
  for (const Case& c : cases) {
    auto cfg = preset_config(c.preset);
    ASSERT_TRUE(cfg.ok()) << c.preset << ": " << cfg.status().to_string();
    EXPECT_EQ(cfg->architecture, c.architecture) << c.preset;
    const double b = double(cfg->num_params()) / 1e9;
    EXPECT_GE(b, c.billions_lo) << c.preset;
    EXPECT_LE(b, c.billions_hi) << c.preset;
  }
  auto g = preset_config("gemma-3-1b");
  ASSERT_TRUE(g.ok());
  int global = 0;
  for (int l = 0; l < g->num_layers; ++l) global += g->layer_attention(l).window == 0;
  EXPECT_EQ(global, 4);  // layers 5, 11, 17, 23 of 26
  EXPECT_EQ(g->layer_attention(5).window, 0);
  EXPECT_EQ(g->layer_attention(0).window, 512);
}

}  // namespace
}  // namespace mt

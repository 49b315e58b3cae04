// The mixture-of-experts families against transformers: each fixture (a tiny random model with
// its variants on, a batch in one forward, transformers' cross-entropy and load-balancing losses
// and the gradients of CE + coef * aux) through our model pass on the CPU reference; an expert no
// token reached has no gradient and is not marked routed; the load-balancing gradient alone; the
// weights exported and read back (gpt-oss's stacked experts in transformers' layout); gpt-oss's
// MXFP4 experts dequantized as transformers does; options we do not implement refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "engine/base/host_memory.h"
#include "engine/exec/model_pass.h"
#include "engine/io/hf_io.h"
#include "engine/io/hf_layout.h"
#include "engine/io/safetensors.h"
#include "tests/engine/model/moe_fixture.h"
#include "tests/engine/temp_dir.h"

namespace mt {
namespace {

using testing_util::moe_batch;
using testing_util::moe_fixture_dir;

ModelConfig moe_config(const std::string& family) {
  auto c = load_model_config(moe_fixture_dir(family));
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? c.value() : ModelConfig{};
}

// A safetensors file of the model's tensors under their Hugging Face names (weights, or
// transformers' gradients of them) into our units, through the loader (gpt-oss: its stacked
// experts' layout).
std::vector<std::vector<float>> load_units(const ModelConfig& cfg, const std::string& file) {
  const auto units = build_param_schemas(cfg);
  auto store = HostStore::create(units, MemoryLayout::kExact, false, default_host_allocator());
  EXPECT_TRUE(store.ok());
  const Status s = load_hf_weights(file, cfg, **store);
  EXPECT_TRUE(s.ok()) << s.to_string();
  std::vector<std::vector<float>> out;
  for (size_t u = 0; u < units.size(); ++u) out.emplace_back((*store)->unit(u).master, (*store)->unit(u).master + units[u].numel);
  return out;
}

struct PassResult {
  double loss = 0, aux = 0;
  std::vector<std::vector<float>> grads;  // per unit; a tied head's share added to the embedding's
  std::vector<char> routed;               // per unit: an expert that received a token
};

// One forward and backward of the batch through model_pass in dtype T; ce_scale scales the
// cross-entropy's gradient (1: the fixture's total loss; 0: the load-balancing loss alone).
template <typename T = float>
PassResult run_pass(const ModelConfig& cfg, const std::vector<std::vector<float>>& w,
                    const testing_util::MoeBatch& b, bool recompute, int token_chunk, float ce_scale = 1) {
  const auto units = build_param_schemas(cfg);
  const auto inv = rope_inv_freq(cfg);
  LayerShape s{&cfg, b.B, b.T, inv.data(), 5, token_chunk};
  s.pos = b.pos.data();
  PassResult r;
  r.grads.resize(units.size());
  r.routed.assign(units.size(), 0);
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
  a.grad_scale = ce_scale / float(b.count);
  a.recompute = recompute;
  a.routed = &r.routed;
  a.aux_loss = &r.aux;
  Workspace ws(model_pass_workspace_bytes<T>(s, recompute));
  auto res = model_pass(cpu_ops<T>(), s, a, ws.data(), ws.bytes());
  EXPECT_TRUE(res.ok()) << res.status().to_string();
  if (!res.ok()) return r;
  for (size_t i = 0; i < tied.size(); ++i) r.grads[0][i] += tied[i];
  r.loss = res->loss_sum / double(res->counted);
  return r;
}

// Each tensor within 1e-4 of its largest entry (family_test.cc justifies the bound); a tensor
// transformers gives no gradient (an expert without tokens) must get exactly none here.
void expect_grads_match(const std::vector<ParamSchema>& units, const std::vector<std::vector<float>>& got,
                        const std::vector<std::vector<float>>& ref, const std::vector<char>* routed) {
  for (size_t u = 0; u < units.size(); ++u) {
    if (routed && units[u].kind == UnitKind::kExpert && !(*routed)[u]) {
      EXPECT_TRUE(std::all_of(got[u].begin(), got[u].end(), [](float g) { return g == 0; })) << "unit " << u;
      EXPECT_TRUE(std::all_of(ref[u].begin(), ref[u].end(), [](float g) { return g == 0; })) << "unit " << u;
      continue;
    }
    for (const TensorSpec& t : units[u].tensors) {
      const float* g = got[u].data() + t.offset;
      const float* e = ref[u].data() + t.offset;
      float scale = 0, worst = 0;
      for (size_t i = 0; i < t.numel; ++i) scale = std::max(scale, std::abs(e[i]));
      for (size_t i = 0; i < t.numel; ++i) worst = std::max(worst, std::abs(g[i] - e[i]));
      EXPECT_LE(worst, 1e-4f * scale + 1e-7f) << t.name << " (largest |gradient| " << scale << ")";
    }
  }
}

class MoeParity : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeParity, LossesAndEveryGradientEqualTransformers) {
  const std::string family = GetParam();
  const ModelConfig cfg = moe_config(family);
  ASSERT_TRUE(cfg.has_experts());
  const auto units = build_param_schemas(cfg);
  const auto b = moe_batch(family);
  EXPECT_DOUBLE_EQ(cfg.moe.aux_coef, b.aux_coef);
  const auto w = load_units(cfg, moe_fixture_dir(family) + "/model.safetensors");
  const auto ref = load_units(cfg, moe_fixture_dir(family) + "/grads.safetensors");
  for (const auto& [recompute, chunk] : {std::pair{false, 0}, std::pair{true, 5}}) {
    SCOPED_TRACE(recompute ? "recompute, token chunks of 5" : "saved activations");
    const PassResult r = run_pass(cfg, w, b, recompute, chunk);
    EXPECT_NEAR(r.loss, b.loss, 1e-5 * b.loss);
    EXPECT_NEAR(r.aux, b.aux_loss, 1e-5 * b.aux_loss);
    // the experts no token reached are exactly the fixture's
    std::set<std::pair<int, int>> idle;
    for (size_t u = 0; u < units.size(); ++u)
      if (units[u].kind == UnitKind::kExpert && !r.routed[u]) idle.emplace(units[u].layer, units[u].expert);
    const std::set<std::pair<int, int>> expected(b.unrouted.begin(), b.unrouted.end());
    EXPECT_EQ(idle, expected);
    EXPECT_FALSE(idle.empty());
    expect_grads_match(units, r.grads, ref, &r.routed);
  }
}

// The load-balancing loss's own gradient (the cross-entropy's scaled to 0) on the routers: it
// flows into each router directly and, through the hidden states, into the earlier layers'.
TEST_P(MoeParity, LoadBalancingGradientAloneEqualsTransformers) {
  const std::string family = GetParam();
  const ModelConfig cfg = moe_config(family);
  const auto units = build_param_schemas(cfg);
  const auto b = moe_batch(family);
  const auto w = load_units(cfg, moe_fixture_dir(family) + "/model.safetensors");
  const PassResult r = run_pass(cfg, w, b, true, 0, 0.0f);
  auto aux = SafetensorsFile::open(moe_fixture_dir(family) + "/aux_grads.safetensors");
  ASSERT_TRUE(aux.ok()) << aux.status().to_string();
  int checked = 0;
  for (size_t u = 0; u < units.size(); ++u)
    for (const TensorSpec& t : units[u].tensors) {
      const TensorInfo* info = (*aux)->find(t.name);
      if (!info) continue;
      std::vector<float> e(t.numel);
      ASSERT_TRUE((*aux)->read_f32(*info, e.data()).ok());
      float scale = 0, worst = 0;
      for (size_t i = 0; i < t.numel; ++i) scale = std::max(scale, std::abs(e[i]));
      for (size_t i = 0; i < t.numel; ++i) worst = std::max(worst, std::abs(r.grads[u][t.offset + i] - e[i]));
      EXPECT_GT(scale, 0.f) << t.name;
      EXPECT_LE(worst, 1e-4f * scale + 1e-9f) << t.name << " (largest |gradient| " << scale << ")";
      ++checked;
    }
  EXPECT_EQ(checked, int((*aux)->tensors().size()));
  EXPECT_GE(checked, cfg.num_moe_layers());
}

double rel_l2(const std::vector<float>& got, const std::vector<float>& ref) {
  double d = 0, r = 0;
  for (size_t i = 0; i < ref.size(); ++i) d += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]), r += double(ref[i]) * ref[i];
  return r > 0 ? std::sqrt(d / r) : std::sqrt(d);
}

// bf16 against transformers' fp32, within the mixed-precision bounds (family_test.cc): the
// losses within 1%, each unit's gradient within 5% relative L2 (an idle expert's: none).
TEST_P(MoeParity, Bf16TracksTransformersFp32) {
  const std::string family = GetParam();
  const ModelConfig cfg = moe_config(family);
  const auto units = build_param_schemas(cfg);
  const auto b = moe_batch(family);
  const auto w = load_units(cfg, moe_fixture_dir(family) + "/model.safetensors");
  const auto ref = load_units(cfg, moe_fixture_dir(family) + "/grads.safetensors");
  const PassResult r = run_pass<bf16>(cfg, w, b, true, 0);
  EXPECT_LT(std::abs(r.loss - b.loss), 0.01 * b.loss);
  EXPECT_LT(std::abs(r.aux - b.aux_loss), 0.01 * b.aux_loss);
  for (size_t u = 0; u < units.size(); ++u) {
    const double e = rel_l2(r.grads[u], ref[u]);
    EXPECT_LT(e, 0.05) << unit_kind_name(units[u].kind) << " " << units[u].layer << "/" << units[u].expert;
  }
}

// Exported, the model is transformers' file again: the same names, shapes and bits.
TEST_P(MoeParity, ExportWritesTheTensorsTransformersSaved) {
  const std::string family = GetParam();
  const ModelConfig cfg = moe_config(family);
  auto store = HostStore::create(build_param_schemas(cfg), MemoryLayout::kExact, false, default_host_allocator());
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE(load_hf_weights(moe_fixture_dir(family), cfg, **store).ok());
  testing_util::TempDir out("mt-moe");
  ASSERT_TRUE(export_hf_model(out / "model", cfg, **store, false, 0).ok());
  auto original = SafetensorsFile::open(moe_fixture_dir(family) + "/model.safetensors");
  auto exported = SafetensorsFile::open(out / "model/model.safetensors");
  ASSERT_TRUE(original.ok() && exported.ok());
  std::set<std::string> names, written;
  for (const auto& t : (*original)->tensors()) names.insert(t.name);
  for (const auto& t : (*exported)->tensors()) written.insert(t.name);
  if (cfg.tie_word_embeddings) names.erase("lm_head.weight");
  EXPECT_EQ(written, names);
  for (const std::string& n : names) {
    const TensorInfo* a = (*original)->find(n);
    const TensorInfo* e = (*exported)->find(n);
    ASSERT_TRUE(a && e) << n;
    EXPECT_EQ(a->shape, e->shape) << n;
    ASSERT_EQ(a->end - a->begin, e->end - e->begin) << n;
    EXPECT_EQ(0, std::memcmp((*original)->bytes(*a), (*exported)->bytes(*e), a->end - a->begin)) << n;
  }
  auto back = load_model_config(out / "model");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->moe, cfg.moe);
}

INSTANTIATE_TEST_SUITE_P(Families, MoeParity, ::testing::ValuesIn(testing_util::moe_fixtures()),
                         [](const auto& info) { return info.param; });

// gpt-oss's hub experts are MXFP4: they load as transformers dequantizes them
// (dequantized.safetensors holds transformers' own output), and the rest of the model as stored.
TEST(MoeMxfp4, GptOssExpertsLoadAsTransformersDequantizesThem) {
  const ModelConfig cfg = moe_config("gpt_oss_mxfp4");
  ASSERT_TRUE(cfg.moe.mxfp4);
  const auto units = build_param_schemas(cfg);
  const auto w = load_units(cfg, moe_fixture_dir("gpt_oss_mxfp4"));
  auto dq = SafetensorsFile::open(moe_fixture_dir("gpt_oss_mxfp4") + "/dequantized.safetensors");
  ASSERT_TRUE(dq.ok()) << dq.status().to_string();
  ModelConfig plain = cfg;
  plain.moe.mxfp4 = false;
  int compared = 0;
  for (const HfTensor& t : hf_tensors(plain, units)) {
    if (t.layout != HfLayout::kGateUpInterleaved && t.layout != HfLayout::kTransposed) continue;
    const TensorInfo* info = (*dq)->find(t.name);
    ASSERT_NE(info, nullptr) << t.name;
    EXPECT_EQ(info->shape, t.shape) << t.name;
    std::vector<float> file(info->numel()), ours(t.part_numel());
    ASSERT_TRUE((*dq)->read_f32(*info, file.data()).ok());
    for (size_t p = 0; p < t.parts.size(); ++p) {
      part_from_file(t.layout, *t.parts[p].second, file.data() + p * t.part_numel(), ours.data());
      const float* loaded = w[t.parts[p].first].data() + t.parts[p].second->offset;
      EXPECT_EQ(0, std::memcmp(ours.data(), loaded, ours.size() * sizeof(float))) << t.name << " expert " << p;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 2 * cfg.num_moe_layers() * cfg.moe.num_experts);
  // Exported, the experts are written unquantized and the config says no quantization; in bf16
  // too the experts are the same values (MXFP4's are exact in bf16).
  auto store = HostStore::create(units, MemoryLayout::kExact, false, default_host_allocator());
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE(load_hf_weights(moe_fixture_dir("gpt_oss_mxfp4"), cfg, **store).ok());
  for (const bool bf16 : {false, true}) {
    testing_util::TempDir out("mt-mxfp4");
    ASSERT_TRUE(export_hf_model(out / "model", cfg, **store, bf16, 0).ok());
    auto back = load_model_config(out / "model");
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_FALSE(back->moe.mxfp4);
    const auto reloaded = load_units(*back, out / "model");
    for (size_t u = 0; u < units.size(); ++u)
      for (const TensorSpec& t : units[u].tensors) {
        const bool quantized = units[u].kind == UnitKind::kExpert && !t.name.ends_with("_bias");
        if (bf16 && !quantized) continue;  // the fixture's fp32 tensors round
        ASSERT_EQ(0, std::memcmp(w[u].data() + t.offset, reloaded[u].data() + t.offset, t.numel * sizeof(float)))
            << (bf16 ? "bf16" : "fp32") << " export, " << t.name;
      }
  }
}

// Options of the MoE families we do not implement are refused naming the key.
TEST(MoeConfigs, UnimplementedOptionsAreRefusedByName) {
  auto config = [](const std::string& family, const std::string& key, const std::string& value) {
    auto text = read_file(moe_fixture_dir(family) + "/config.json");
    EXPECT_TRUE(text.ok());
    auto j = Json::parse(text.value());
    EXPECT_TRUE(j.ok());
    auto v = Json::parse(value);
    EXPECT_TRUE(v.ok());
    j->set(key, *v);
    return parse_model_config(j->dump(), family);
  };
  const struct {
    const char* family;
    const char* key;
    const char* value;
  } cases[] = {
      {"mixtral", "router_jitter_noise", "0.1"},
      {"qwen3_moe", "use_sliding_window", "true"},
      {"qwen2_moe", "use_sliding_window", "true"},
      {"qwen3_moe", "num_experts", "7"},  // beside num_local_experts 6
      {"gpt_oss", "quantization_config", R"({"quant_method": "fp8"})"},
      {"gpt_oss", "hidden_act", R"("gelu")"},
      {"mixtral", "num_experts_per_tok", "5"},  // more than its 4 experts
      {"qwen2_moe", "mlp_only_layers", "[7]"},
      {"mixtral", "attention_bias", "true"},
  };
  for (const auto& c : cases) {
    auto r = config(c.family, c.key, c.value);
    ASSERT_FALSE(r.ok()) << c.family << " " << c.key << " = " << c.value;
    EXPECT_NE(r.status().message().find(c.key), std::string::npos) << r.status().to_string();
  }
  // Dense families do not read the MoE keys: set, they are refused rather than ignored.
  auto dense = testing_util::family_config("qwen3");
  Json j = dense.raw;
  j.set("num_experts", Json(8));
  auto r = parse_model_config(j.dump(), "qwen3 with experts");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("num_experts"), std::string::npos) << r.status().to_string();
}

}  // namespace
}  // namespace mt

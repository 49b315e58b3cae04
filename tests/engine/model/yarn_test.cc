// YaRN RoPE scaling (rope_scaling.rope_type = "yarn", as Qwen2.5 configures it) against values
// computed independently from the formulas of Hugging Face transformers 5.24.0,
// src/transformers/modeling_rope_utils.py, _compute_yarn_parameters: the constants below were
// produced once by a stand-alone Python script that restates those formulas in double precision
// (inv_freq_i = interp_i (1 - e_i) + extrap_i e_i with extrap_i = theta^(-2i/dim),
// interp_i = extrap_i / factor, e_i = 1 - clamp((i - low) / (high - low), 0, 1),
// low/high = floor/ceil of dim ln(orig / (2 pi beta)) / (2 ln theta) for beta_fast/beta_slow;
// attention_factor = 0.1 ln(factor) + 1, or get_mscale(factor, mscale) / get_mscale(factor,
// mscale_all_dim)). transformers computes in fp32; our table is fp32 rounded from double, so it
// must be within 2 fp32 ulps (2.4e-7 relative) of the double values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/data/data_source.h"
#include "engine/exec/resident_executor.h"
#include "engine/model/init.h"
#include "engine/model/model_config.h"

namespace mt {
namespace {

constexpr double kRel = 2.4e-7;

// Qwen2.5-7B's shape with the YaRN block its model card gives for 128K context.
const char* const kQwen25Yarn = R"({
  "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
  "intermediate_size": 18944, "num_attention_heads": 28, "num_hidden_layers": 28,
  "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 32768,
  "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "use_sliding_window": false,
  "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}})";

// theta 1e6, dim 128, factor 4, original 32768, beta 32/1: ramp from pair 23 to pair 40.
const double kQwenInvFreq[64] = {
    1, 0.80584218776148187, 0.64938163157621132, 0.5232991146814947,
    0.42169650342858228, 0.33982083289425591, 0.27384196342643613, 0.22067340690845899,
    0.17782794100389226, 0.14330125702369628, 0.1154781984689458, 0.0930572040929699,
    0.074989420933245579, 0.060429639023813278, 0.048696752516586311, 0.039241897584845357,
    0.031622776601683791, 0.025482967479793464, 0.020535250264571463, 0.016548170999431816,
    0.013335214321633241, 0.010746078283213174, 0.0086596432336006526, 0.0069783058485986633,
    0.0053753214907901019, 0.0041317380225183937, 0.0031684225747110918, 0.0024234223804076435,
    0.0018482765647068781, 0.0014051124815959123, 0.0010643609812470017, 0.00080295972754523023,
    0.00060294117647058821, 0.00045032357551376927, 0.00033424054566422634, 0.00024625840690893869,
    0.00017984115587395423, 0.00012993149493015669, 9.2623017041294588e-05, 6.4903943208370279e-05,
    4.4456985250973067e-05, 3.5825314255924068e-05, 2.8869549617236455e-05, 2.3264301023242475e-05,
    1.8747355233311396e-05, 1.5107409755953319e-05, 1.2174188129146578e-05, 9.8104743962113409e-06,
    7.9056941504209488e-06, 6.3707418699483669e-06, 5.1338125661428656e-06, 4.1370427498579532e-06,
    3.3338035804083101e-06, 2.6865195708032935e-06, 2.1649108084001634e-06, 1.744576462149666e-06,
    1.4058533129758728e-06, 1.1328959094002045e-06, 9.1293531813709427e-07, 7.3568179405232051e-07,
    5.928434264154138e-07, 4.7773824374261011e-07, 3.8498163151487298e-07, 3.1023444018792988e-07};

// theta 1e4, dim 64, factor 40, original 4096, beta 16/2, truncate false, mscale 0.707 over
// mscale_all_dim 1 (the DeepSeek form of the attention factor).
const double kMscaleInvFreq[32] = {
    1, 0.74989420933245587, 0.56234132519034907, 0.42169650342858228,
    0.31622776601683794, 0.23713737056616555, 0.17782794100389226, 0.1333521432163324,
    0.10000000000000001, 0.074989420933245579, 0.056234132519034905, 0.042169650342858224,
    0.031622776601683791, 0.023331245927101563, 0.0150961189570579, 0.0095208606255950332,
    0.0057901049624471072, 0.0033299589843826783, 0.001738218621832589, 0.00073438661002493623,
    0.00012395236926610428, 5.9284342641541371e-05, 4.4456985250973074e-05, 3.3338035804083099e-05,
    2.5000000000000001e-05, 1.8747355233311396e-05, 1.4058533129758728e-05, 1.0542412585714557e-05,
    7.9056941504209471e-06, 5.9284342641541385e-06, 4.4456985250973073e-06, 3.3338035804083101e-06};

ModelConfig parse(const std::string& json) {
  auto r = parse_model_config(json, "test");
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? r.value() : ModelConfig{};
}

void expect_inv_freq(const ModelConfig& cfg, const double* want, int n) {
  const std::vector<float> got = rope_inv_freq(cfg);
  ASSERT_EQ(int(got.size()), n);
  for (int i = 0; i < n; ++i) EXPECT_NEAR(got[size_t(i)], want[i], kRel * want[i]) << "pair " << i;
}

TEST(YarnRope, Qwen25StyleConfigMatchesTheTransformersFormulas) {
  const ModelConfig cfg = parse(kQwen25Yarn);
  EXPECT_EQ(cfg.rope_scaling.type, "yarn");
  expect_inv_freq(cfg, kQwenInvFreq, 64);
  EXPECT_NEAR(cfg.rope_attention_factor, 1.138629436111989, 1e-15);  // 0.1 ln 4 + 1
}

TEST(YarnRope, MscaleBetasAndAnUntruncatedRampMatch) {
  const ModelConfig cfg = parse(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 256,
      "intermediate_size": 512, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100,
      "max_position_embeddings": 163840, "rope_theta": 10000.0,
      "rope_scaling": {"rope_type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                       "beta_fast": 16, "beta_slow": 2, "mscale": 0.707, "mscale_all_dim": 1.0,
                       "truncate": false}})");
  expect_inv_freq(cfg, kMscaleInvFreq, 32);
  EXPECT_NEAR(cfg.rope_attention_factor, 0.9210423553163399, 1e-15);
}

TEST(YarnRope, AGivenAttentionFactorWinsAndOriginalDefaultsToMaxPositions) {
  std::string j = kQwen25Yarn;
  const std::string orig = "\"original_max_position_embeddings\": 32768, ";
  j.replace(j.find(orig), orig.size(), "\"attention_factor\": 1.25, ");
  const ModelConfig cfg = parse(j);
  EXPECT_EQ(cfg.rope_attention_factor, 1.25);
  EXPECT_EQ(cfg.rope_scaling.original_max_position_embeddings, 32768);  // max_position_embeddings
  expect_inv_freq(cfg, kQwenInvFreq, 64);
}

TEST(YarnRope, OtherScalingsKeepAnAttentionFactorOfOne) {
  std::string j = kQwen25Yarn;
  j.replace(j.find("\"yarn\""), 6, "\"linear\"");
  EXPECT_EQ(parse(j).rope_attention_factor, 1.0);
}

TEST(YarnRope, BadFieldsAreRefusedByName) {
  const std::string base = kQwen25Yarn;
  auto refused = [&](const std::string& from, const std::string& to, const std::string& field) {
    std::string j = base;
    j.replace(j.find(from), from.size(), to);
    auto r = parse_model_config(j, "test");
    ASSERT_FALSE(r.ok()) << to;
    EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status().message();
  };
  refused("\"factor\": 4.0, ", "", "rope_scaling.factor");
  refused("\"factor\": 4.0, ", "\"factor\": 4.0, \"beta_fast\": -1, ", "rope_scaling.beta_fast");
  refused("\"factor\": 4.0, ", "\"factor\": 4.0, \"truncate\": 1, ", "rope_scaling.truncate");
  refused("\"yarn\"", "\"longrope\"", "rope_scaling.rope_type");
}

// A small model with YaRN trains: the loss falls over a few steps, and the scaling is in effect
// (the first loss differs from the same model and data without it).
TEST(YarnTrain, AConfigWithYarnLoadsAndTrains) {
  const std::string shape = R"("architectures": ["Qwen2ForCausalLM"], "hidden_size": 32, "intermediate_size": 48,
      "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 64,
      "max_position_embeddings": 64, "rope_theta": 100.0)";
  const ModelConfig yarn = parse("{" + shape + R"(, "rope_scaling": {"type": "yarn", "factor": 4.0,
      "original_max_position_embeddings": 16, "beta_fast": 8, "beta_slow": 1}})");
  const ModelConfig plain = parse("{" + shape + "}");
  ASSERT_GT(yarn.rope_attention_factor, 1.0);
  TrainOptions opt;
  opt.seq_len = 48;  // past the original context
  opt.micro_batch = 2;
  opt.global_batch = 4;
  opt.optimizer.lr = 3e-3f;
  std::vector<double> losses;
  double plain_loss = 0;
  for (const ModelConfig* cfg : {&yarn, &plain}) {
    auto e = ResidentExecutor::create(*cfg, opt);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    init_weights(*cfg, (*e)->store(), 7);
    auto src = make_synthetic_source({3, cfg->vocab_size, 16, 2});
    ASSERT_TRUE(src.ok());
    Batch b;
    for (int s = 0; s < (cfg == &yarn ? 6 : 1); ++s) {
      ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, b).ok());
      auto st = (*e)->step(b);
      ASSERT_TRUE(st.ok()) << st.status().to_string();
      ASSERT_TRUE(std::isfinite(st->loss));
      if (cfg == &yarn) losses.push_back(st->loss);
      else plain_loss = st->loss;
    }
  }
  EXPECT_LT(losses.back(), losses.front());
  EXPECT_NE(losses.front(), plain_loss);
}

double first_loss(const ModelConfig& cfg) {
  TrainOptions opt;
  opt.seq_len = 48;
  opt.micro_batch = 2;
  opt.global_batch = 2;
  auto e = ResidentExecutor::create(cfg, opt);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  if (!e.ok()) return NAN;
  init_weights(cfg, (*e)->store(), 7);
  auto src = make_synthetic_source({3, cfg.vocab_size, 16, 2});
  Batch b;
  EXPECT_TRUE(src.ok() && (*src)->next_batch(opt.global_batch, opt.seq_len, b).ok());
  auto st = (*e)->step(b);
  EXPECT_TRUE(st.ok()) << st.status().to_string();
  return st.ok() ? st->loss : NAN;
}

// Gemma 3's sliding layers rotate by their own default-RoPE table: YaRN's attention factor
// belongs to the global table only (transformers builds the local rotary embedding from a config
// whose rope_scaling is default). It scaled the local layers' q and k too; a model whose layers
// are all local now gives the same bits with and without YaRN, and one with a global layer does not.
TEST(YarnTrain, GemmaThreesLocalLayersTakeNoYarnFactor) {
  const auto gemma3 = [](const std::string& layer_types, bool yarn) {
    return parse(R"({"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": 32,
        "intermediate_size": 40, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
        "vocab_size": 64, "max_position_embeddings": 64, "rope_theta": 100.0, "rope_local_base_freq": 10.0,
        "sliding_window": 8, "query_pre_attn_scalar": 8, "hidden_activation": "gelu_pytorch_tanh",
        "num_hidden_layers": )" + std::to_string(std::count(layer_types.begin(), layer_types.end(), ',') + 1) +
                 R"(, "layer_types": [)" + layer_types + "]" +
                 (yarn ? R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16})"
                       : "") +
                 "}");
  };
  const std::string local = R"("sliding_attention", "sliding_attention")";
  ASSERT_GT(gemma3(local, true).rope_attention_factor, 1.0);
  EXPECT_EQ(first_loss(gemma3(local, true)), first_loss(gemma3(local, false)));
  const std::string mixed = R"("sliding_attention", "full_attention")";
  EXPECT_NE(first_loss(gemma3(mixed, true)), first_loss(gemma3(mixed, false)));
}

}  // namespace
}  // namespace mt

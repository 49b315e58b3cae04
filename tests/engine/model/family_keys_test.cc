// Keys whose meaning depends on the family, read as transformers 5 reads them (found by a
// parity hunt against transformers 5.25: each case below computed a different model from
// transformers, or trained a config transformers refuses). Where transformers ignores a key
// that would change the model, the key is refused unless it says what transformers computes.
#include <gtest/gtest.h>

#include <string>

#include "engine/model/model_config.h"

namespace mt {
namespace {

const char* kShape = R"("hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 128, "max_position_embeddings": 256)";

Result<ModelConfig> parse(const std::string& arch, const std::string& keys) {
  return parse_model_config("{\"architectures\": [\"" + arch + "\"], " + kShape + (keys.empty() ? "" : ", ") + keys +
                                "}",
                            "config.json");
}

void expect_refused(const Result<ModelConfig>& c, const std::string& field) {
  ASSERT_FALSE(c.ok()) << "accepted";
  EXPECT_NE(c.status().message().find(field), std::string::npos) << c.status().message();
}

// standardize_rope_params: a flat llama3 or yarn object takes a top-level
// original_max_position_embeddings over its own (or max_position_embeddings when it has none).
TEST(FamilyKeys, ATopLevelOriginalContextReplacesAFlatRopeObjectsOwn) {
  const std::string llama3 = R"("rope_parameters": {"rope_type": "llama3", "factor": 8.0, "rope_theta": 1000.0,
      "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16})";
  auto own = parse("LlamaForCausalLM", llama3);
  ASSERT_TRUE(own.ok()) << own.status().to_string();
  EXPECT_EQ(own->rope_scaling.original_max_position_embeddings, 16);
  auto top = parse("LlamaForCausalLM", llama3 + R"(, "original_max_position_embeddings": 4)");
  ASSERT_TRUE(top.ok()) << top.status().to_string();
  EXPECT_EQ(top->rope_scaling.original_max_position_embeddings, 4);
  auto yarn = parse("LlamaForCausalLM", R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0,
      "original_max_position_embeddings": 64}, "original_max_position_embeddings": 32)");
  ASSERT_TRUE(yarn.ok()) << yarn.status().to_string();
  EXPECT_EQ(yarn->rope_scaling.original_max_position_embeddings, 32);
  auto plain = parse("LlamaForCausalLM", R"("original_max_position_embeddings": 32)");
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();  // default RoPE: not read
  EXPECT_EQ(plain->rope_scaling.type, "default");
}

// Gemma3TextConfig.default_theta = {"global": 1e6, "local": 1e4}: a file without RoPE keys, or a
// per-type object without rope_theta, gets those.
TEST(FamilyKeys, Gemma3sDefaultThetasAreAMillionGlobalAndTenThousandLocal) {
  auto none = parse("Gemma3ForCausalLM", "");
  ASSERT_TRUE(none.ok()) << none.status().to_string();
  EXPECT_EQ(none->rope_theta, 1e6);
  EXPECT_EQ(none->rope_local_theta, 1e4);
  auto typed = parse("Gemma3ForCausalLM", R"("rope_parameters": {"full_attention": {"rope_type": "linear",
      "factor": 2.0}, "sliding_attention": {"rope_type": "default"}})");
  ASSERT_TRUE(typed.ok()) << typed.status().to_string();
  EXPECT_EQ(typed->rope_theta, 1e6);
  EXPECT_EQ(typed->rope_local_theta, 1e4);
  EXPECT_EQ(typed->rope_scaling.type, "linear");
  auto v4 = parse("Gemma3ForCausalLM", R"("rope_scaling": {"rope_type": "linear", "factor": 8.0},
      "rope_local_base_freq": 20000)");
  ASSERT_TRUE(v4.ok()) << v4.status().to_string();
  EXPECT_EQ(v4->rope_theta, 1e6);
  EXPECT_EQ(v4->rope_local_theta, 20000);
}

// Gemma3TextConfig.convert_rope_params_to_dict adds per-type objects beside flat
// rope_parameters and never reads the flat keys; its attention passes no soft cap.
TEST(FamilyKeys, Gemma3RefusesWhatTransformersDoesNotRead) {
  expect_refused(parse("Gemma3ForCausalLM", R"("rope_parameters": {"rope_type": "linear", "factor": 4.0,
      "rope_theta": 1000000.0})"), "rope_parameters");
  expect_refused(parse("Gemma3ForCausalLM", R"("attn_logit_softcapping": 2.0)"), "attn_logit_softcapping");
  auto null_cap = parse("Gemma3ForCausalLM", R"("attn_logit_softcapping": null, "final_logit_softcapping": 30.0)");
  ASSERT_TRUE(null_cap.ok()) << null_cap.status().to_string();
  EXPECT_EQ(null_cap->attention_softcap, 0);
  EXPECT_EQ(null_cap->final_softcap, 30);
  auto gemma2 = parse("Gemma2ForCausalLM", R"("attn_logit_softcapping": 2.0)");
  ASSERT_TRUE(gemma2.ok()) << gemma2.status().to_string();
  EXPECT_EQ(gemma2->attention_softcap, 2);
}

// Gemma 2 and 3's MLPs read hidden_activation; a hidden_act beside it is not read (the hub's
// files carry both, and Gemma 1's "gelu" must not be refused or applied).
TEST(FamilyKeys, GemmasMlpReadsHiddenActivationOnly) {
  for (const char* arch : {"Gemma2ForCausalLM", "Gemma3ForCausalLM"}) {
    auto c = parse(arch, R"("hidden_activation": "gelu_pytorch_tanh", "hidden_act": "silu")");
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->activation.kind, GateActivation::kGeluTanh) << arch;
    auto gelu = parse(arch, R"("hidden_act": "gelu")");
    ASSERT_TRUE(gelu.ok()) << gelu.status().to_string();
    EXPECT_EQ(gelu->activation.kind, GateActivation::kGeluTanh) << arch;
  }
}

// Mixtral and Phi-3 slide on every layer when sliding_window is set; transformers never reads
// their layer_types, so one that says otherwise is refused and one that agrees is accepted.
TEST(FamilyKeys, LayerTypesThatMixtralAndPhi3IgnoreMustAgreeWithTheirWindow) {
  for (const char* arch : {"MixtralForCausalLM", "Phi3ForCausalLM"}) {
    expect_refused(parse(arch, R"("sliding_window": 8, "layer_types": ["full_attention", "sliding_attention"])"),
                   "layer_types");
    expect_refused(parse(arch, R"("sliding_window": 8, "layer_types": ["full_attention", "full_attention"])"),
                   "layer_types");
    auto agrees = parse(arch, R"("sliding_window": 8, "layer_types": ["sliding_attention", "sliding_attention"])");
    ASSERT_TRUE(agrees.ok()) << agrees.status().to_string();
    EXPECT_EQ(agrees->layer_attention(0).window, 8);
    EXPECT_EQ(agrees->layer_attention(1).window, 8);
  }
  auto mistral = parse("MistralForCausalLM", R"("sliding_window": 8, "layer_types": ["full_attention",
      "sliding_attention"])");  // Mistral's does read them
  ASSERT_TRUE(mistral.ok()) << mistral.status().to_string();
  EXPECT_EQ(mistral->layer_attention(0).window, 0);
  EXPECT_EQ(mistral->layer_attention(1).window, 8);
}

// Phi3Config.validate_rope allows the default RoPE and longrope only.
TEST(FamilyKeys, Phi3RefusesRopeTypesTransformersRefuses) {
  expect_refused(parse("Phi3ForCausalLM", R"("rope_scaling": {"rope_type": "linear", "factor": 2.0})"), "rope");
  expect_refused(parse("Phi3ForCausalLM", R"("rope_parameters": {"rope_type": "yarn", "factor": 2.0,
      "rope_theta": 10000.0})"), "rope");
  EXPECT_TRUE(parse("Phi3ForCausalLM", R"("rope_theta": 250000.0, "original_max_position_embeddings": 4096)").ok());
}

}  // namespace
}  // namespace mt

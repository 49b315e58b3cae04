// Issue 24.1: config.json as transformers 4 writes it (top-level rope_theta, rope_scaling,
// torch_dtype) and as transformers 5 does (rope_parameters, dtype, layer_types) read as the same
// model: for each supported family, fixtures of both forms (tests/fixtures/configs/FAMILY/) give
// the same RoPE and the same loss bit for bit, and the loss with the RoPE lost (theta 10000, the
// defect) differs. Both forms present and disagreeing are refused naming the fields; every key is
// read, known to be harmless, or refused by name.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/data/data_source.h"
#include "engine/exec/resident_executor.h"
#include "engine/model/init.h"
#include "engine/model/model_config.h"
#include "tests/test_paths.h"

namespace mt {
namespace {

std::string fixture(const std::string& family, const std::string& form) {
  return std::string(mt::testing_util::source_dir()) + "/tests/fixtures/configs/" + family + "/" + form + ".json";
}

Json fixture_json(const std::string& family, const std::string& form) {
  auto text = read_file(fixture(family, form));
  EXPECT_TRUE(text.ok()) << fixture(family, form);
  auto j = Json::parse(text.ok() ? *text : "{}");
  EXPECT_TRUE(j.ok());
  return j.ok() ? *j : Json::object();
}

// The first loss of the config's model (weights from seed 5) on one fixed batch of 64-token rows
// that reach past the llama3/yarn original context (64), so every RoPE field is in effect.
double first_loss(const ModelConfig& cfg) {
  TrainOptions opt;
  opt.seq_len = 128;
  opt.micro_batch = opt.global_batch = 2;
  auto e = ResidentExecutor::create(cfg, opt);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  if (!e.ok()) return 0;
  init_weights(cfg, (*e)->store(), 5);
  auto src = make_synthetic_source({11, cfg.vocab_size, 16, 2});
  EXPECT_TRUE(src.ok());
  Batch b;
  EXPECT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, b).ok());
  auto loss = (*e)->mean_loss(b);
  EXPECT_TRUE(loss.ok()) << loss.status().to_string();
  return loss.ok() ? *loss : 0;
}

Status parse_status(const Json& j) { return parse_model_config(j.dump(), "config.json").status(); }

Json copy(const Json& j) { return *Json::parse(j.dump()); }  // Json copies share their members

class ConfigForms : public ::testing::TestWithParam<std::string> {};

TEST_P(ConfigForms, Transformers5ReadsAsTheTransformers4FormWithTheSameLoss) {
  auto v4 = load_model_config(fixture(GetParam(), "transformers4"));
  auto v5 = load_model_config(fixture(GetParam(), "transformers5"));
  ASSERT_TRUE(v4.ok()) << v4.status().to_string();
  ASSERT_TRUE(v5.ok()) << v5.status().to_string();
  EXPECT_NE(v5->rope_theta, 10000.0) << "rope_parameters.rope_theta was not read";
  EXPECT_EQ(v5->rope_theta, v4->rope_theta);
  EXPECT_EQ(v5->rope_scaling.type, v4->rope_scaling.type);
  EXPECT_EQ(v5->rope_attention_factor, v4->rope_attention_factor);
  EXPECT_EQ(rope_inv_freq(*v5), rope_inv_freq(*v4));
  const double l4 = first_loss(*v4), l5 = first_loss(*v5);
  EXPECT_EQ(l5, l4);
  // The defect's model: rope_parameters dropped, as the reader before the fix did. Its loss
  // differs, so equal losses above say the RoPE was read.
  Json lost = fixture_json(GetParam(), "transformers5");
  Json kept = Json::object();
  for (const auto& [k, v] : lost.members())
    if (k != "rope_parameters") kept.set(k, v);
  auto defect = parse_model_config(kept.dump(), "config.json");
  ASSERT_TRUE(defect.ok()) << defect.status().to_string();
  EXPECT_EQ(defect->rope_theta, 10000.0);
  EXPECT_NE(first_loss(*defect), l5);
}

INSTANTIATE_TEST_SUITE_P(Families, ConfigForms,
                         ::testing::Values("llama", "llama3", "mistral", "qwen2", "qwen2-yarn"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

// Both forms in one file: accepted when they agree, refused naming both when they do not.
TEST(ConfigForms, BothFormsMustAgree) {
  Json both = fixture_json("llama3", "transformers5");
  both.set("rope_theta", 500000.0);
  both.set("rope_scaling", Json::object({{"factor", 8.0}, {"high_freq_factor", 4.0}, {"low_freq_factor", 1.0},
                                          {"original_max_position_embeddings", 64}, {"rope_type", "llama3"}}));
  EXPECT_TRUE(parse_status(both).ok()) << parse_status(both).to_string();
  Json theta = copy(both);
  theta.set("rope_theta", 10000.0);
  Json scaling = copy(both);
  scaling.set("rope_scaling", Json::object({{"factor", 4.0}, {"rope_type", "linear"}}));
  for (const Json& j : {theta, scaling}) {
    const Status st = parse_status(j);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("'rope_parameters'"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("rope_theta / rope_scaling"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("disagree"), std::string::npos) << st.message();
  }
}

// Every key is read, harmless, or refused by name; inside a RoPE object too.
TEST(ConfigForms, EveryKeyIsReadHarmlessOrRefusedByName) {
  const Json base = fixture_json("llama", "transformers5");
  struct Case {
    std::string key;
    Json value;
    std::string needle;  // "" = accepted
  };
  const std::vector<Case> cases = {
      {"_name_or_path", "meta-llama/Llama-3.2-1B", ""},
      {"temperature", 0.6, ""},
      {"id2label", Json::object({{"0", "LABEL_0"}}), ""},
      {"pruned_heads", Json::object(), ""},
      {"layer_types", Json::array({"full_attention", "full_attention"}), ""},
      {"rope_scalling", Json::object(), "field 'rope_scalling' is not a key MegaTrain reads"},
      {"unsloth_fixed", true, "field 'unsloth_fixed' is not a key MegaTrain reads"},
      {"quantization_config", Json::object({{"quant_method", "bitsandbytes"}}), "quantized weights"},
      {"auto_map", Json::object(), "custom modeling code"},
      {"final_logit_softcapping", 30.0, "'final_logit_softcapping'"},
      {"is_encoder_decoder", true, "'is_encoder_decoder' must be false"},
      {"pruned_heads", Json::object({{"0", Json::array({1})}}), "'pruned_heads' names pruned attention heads"},
      {"attention_dropout", 0.5, "'attention_dropout' is 0.5; attention dropout is not implemented"},
      {"layer_types", Json::array({"full_attention", "sliding_attention"}), "'layer_types[1]' is \"sliding_attention\""},
      {"layer_types", Json::array({"full_attention"}), "'layer_types' must list one attention type for each of the 2"},
      {"rope_parameters", Json::object({{"rope_theta", 1e4}, {"rope_type", "default"}, {"factor", 2.0}}),
       "'rope_parameters.factor' is not read for rope_type 'default'"},
      {"rope_parameters", Json::object({{"rope_theta", 1e4}, {"rope_type", "default"}, {"partial_rotary_factor", 1.0}}), ""},
      {"rope_parameters", Json::object({{"rope_theta", 1e4}, {"rope_type", "default"}, {"partial_rotary_factor", 0.5}}),
       "'rope_parameters.partial_rotary_factor' must be 1"},
      {"rope_parameters", Json::object({{"rope_theta", 1e4}, {"rope_type", "longrope"}}),
       "'rope_parameters.rope_type' 'longrope' is not supported"},
      {"rope_parameters", Json::object({{"full_attention", Json::object({{"rope_theta", 1e4}, {"rope_type", "default"}})}}),
       "'rope_parameters.full_attention' is RoPE per layer type, which transformers does not read for LlamaForCausalLM"},
      {"torchscript", false, ""},
      {"torchscript", true, "'torchscript' must be false"},
      {"pad_token_id", 0, ""},
  };
  for (const Case& c : cases) {
    Json j = copy(base);
    j.set(c.key, c.value);
    const Status st = parse_status(j);
    if (c.needle.empty()) {
      EXPECT_TRUE(st.ok()) << c.key << ": " << st.to_string();
    } else {
      ASSERT_FALSE(st.ok()) << c.key << " = " << c.value.dump() << " was accepted";
      EXPECT_NE(st.message().find(c.needle), std::string::npos) << st.message();
    }
  }
}

// Keys a file leaves out mean what transformers makes of them: RMSNorm eps 1e-6, key/value heads
// = heads (Llama), 8 (Mistral), 32 (Qwen2); a Mistral without sliding_window has a 4096 window.
TEST(ConfigForms, AbsentKeysTakeTheFamilyDefaults) {
  const std::string shape = R"("hidden_size": 256, "num_hidden_layers": 1, "num_attention_heads": 32,
      "intermediate_size": 64, "vocab_size": 64)";
  for (const auto& [arch, kv] : {std::pair{"LlamaForCausalLM", 32}, {"Qwen2ForCausalLM", 32}}) {
    auto c = parse_model_config(std::string("{\"architectures\": [\"") + arch + "\"], " + shape + "}", "config.json");
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->num_kv_heads, kv) << arch;
    EXPECT_EQ(c->rms_norm_eps, 1e-6) << arch;
  }
  auto mistral = parse_model_config(R"({"architectures": ["MistralForCausalLM"], "sliding_window": null, )" + shape + "}",
                                    "config.json");
  ASSERT_TRUE(mistral.ok()) << mistral.status().to_string();
  EXPECT_EQ(mistral->num_kv_heads, 8);
  EXPECT_EQ(mistral->layer_attention(0).window, 0);
  auto windowed = parse_model_config(R"({"architectures": ["MistralForCausalLM"], )" + shape + "}", "config.json");
  ASSERT_TRUE(windowed.ok()) << windowed.status().to_string();
  EXPECT_EQ(windowed->layer_attention(0).window, 4096);
  auto qwen = parse_model_config(R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64, "num_hidden_layers": 1,
      "num_attention_heads": 4, "intermediate_size": 64, "vocab_size": 64})", "config.json");
  ASSERT_FALSE(qwen.ok()) << "4 heads cannot share Qwen2's default 32 key/value heads";
  EXPECT_NE(qwen.status().message().find("num_key_value_heads"), std::string::npos) << qwen.status().message();
  auto pad = parse_model_config(R"({"architectures": ["LlamaForCausalLM"], "pad_token_id": 3, )" + shape + "}", "config.json");
  ASSERT_TRUE(pad.ok());
  EXPECT_EQ(pad->pad_token_id, 3);
}

// Every preset and every fixture passes the key audit (a preset is a config.json too).
TEST(ConfigForms, EveryPresetLoads) {
  for (const auto& name : preset_names()) EXPECT_TRUE(preset_config(name).ok()) << name;
}

}  // namespace
}  // namespace mt

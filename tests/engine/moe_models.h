// Tiny mixture-of-experts configs for tests, one per family with its variants on, written as the
// family's config.json and parsed like any checkpoint's (the parity fixtures of
// tests/fixtures/moe hold transformers' own tiny models; these are for the engine's mechanics).
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "engine/model/model_config.h"

namespace mt::testing_util {

inline ModelConfig moe_model(const std::string& name) {
  const std::string common =
      R"("hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 64,
         "output_router_logits": true, "router_aux_loss_coef": 0.05, )";
  std::string json;
  if (name == "mixtral")  // softmax router, top 2 of 6 renormalised, a sliding window
    json = R"({"architectures": ["MixtralForCausalLM"], "num_hidden_layers": 2, "intermediate_size": 24,
               "num_local_experts": 6, "num_experts_per_tok": 2, "sliding_window": 5, )" + common;
  else if (name == "qwen2_moe")  // a shared expert with its gate, q/k/v biases, layer 1 dense
    json = R"({"architectures": ["Qwen2MoeForCausalLM"], "num_hidden_layers": 3, "intermediate_size": 40,
               "num_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
               "shared_expert_intermediate_size": 20, "mlp_only_layers": [1], )" + common;
  else if (name == "qwen3_moe")  // q/k norms, head_dim 12, top 2 renormalised, every 2nd layer MoE
    json = R"({"architectures": ["Qwen3MoeForCausalLM"], "num_hidden_layers": 4, "intermediate_size": 40,
               "head_dim": 12, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
               "norm_topk_prob": true, "decoder_sparse_step": 2, "tie_word_embeddings": true, )" + common;
  else if (name == "gpt_oss")  // sinks, biases everywhere, alternating windows, top-k softmax, clamped SwiGLU
    json = R"({"architectures": ["GptOssForCausalLM"], "num_hidden_layers": 2, "intermediate_size": 16,
               "head_dim": 12, "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 5,
               "swiglu_limit": 0.02, )" + common;
  else if (name == "sparse")  // 16 experts, one per token: a handful of tokens leaves most idle
    json = R"({"architectures": ["Qwen3MoeForCausalLM"], "num_hidden_layers": 2, "intermediate_size": 40,
               "num_experts": 16, "num_experts_per_tok": 1, "moe_intermediate_size": 8, )" + common;
  json.erase(json.find_last_of(','));  // the trailing comma of `common`
  json += "}";
  auto r = parse_model_config(json, "moe_models.h " + name);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? r.value() : ModelConfig{};
}

}  // namespace mt::testing_util

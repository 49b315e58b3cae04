// A small Llama-family (or Qwen2) model config for tests, built as HF config.json and parsed
// like any checkpoint's, so tests state only the dimensions they care about.
#pragma once
#include <gtest/gtest.h>

#include "engine/base/json.h"
#include "engine/model/model_config.h"

namespace mt::testing_util {

struct TestModel {
  const char* arch = "LlamaForCausalLM";  // or "Qwen2ForCausalLM" (QKV bias)
  int hidden = 32, layers = 2, heads = 4, kv_heads = 2;
  int intermediate = 48, vocab = 64;
  bool tied = false;
  int head_dim = 0;       // 0: hidden / heads
  double rope_theta = 0;  // 0: the config default
};

inline ModelConfig test_model_config(const TestModel& m) {
  Json j = Json::object({{"architectures", Json::array({m.arch})},
                         {"hidden_size", m.hidden},
                         {"num_hidden_layers", m.layers},
                         {"num_attention_heads", m.heads},
                         {"num_key_value_heads", m.kv_heads},
                         {"intermediate_size", m.intermediate},
                         {"vocab_size", m.vocab},
                         {"tie_word_embeddings", m.tied}});
  if (m.head_dim) j.set("head_dim", m.head_dim);
  if (m.rope_theta) j.set("rope_theta", m.rope_theta);
  auto r = parse_model_config(j.dump(), "test");
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.value();
}

}  // namespace mt::testing_util

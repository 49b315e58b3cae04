// HF model directories: export (config.json + shards + index) and import back, exactly for fp32.
#include "engine/io/hf_io.h"

#include <gtest/gtest.h>

#include <limits>
#include <stdlib.h>

#include <filesystem>
#include <random>

#include "engine/base/json.h"

#include "tests/engine/temp_dir.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

struct TempDir : testing_util::TempDir {
  TempDir() : testing_util::TempDir("mt-hf") {}
};

ModelConfig config(bool tied, bool bias = false) {
  auto cfg = preset_config("tiny");
  EXPECT_TRUE(cfg.ok());
  Json j = model_config_to_json(*cfg);
  j.set("tie_word_embeddings", tied);
  if (bias) {  // Qwen2: q/k/v biases
    j.set("architectures", Json::array({Json("Qwen2ForCausalLM")}));
    j.set("model_type", "qwen2");
  }
  auto out = parse_model_config(j.dump(), "test");
  EXPECT_TRUE(out.ok()) << out.status().to_string();
  return *out;
}

std::unique_ptr<HostStore> random_store(const ModelConfig& cfg, uint32_t seed, bool shadow = false) {
  auto s = HostStore::create(build_param_schemas(cfg), MemoryLayout::kExact, shadow, default_host_allocator());
  EXPECT_TRUE(s.ok());
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 0.05f);
  for (size_t i = 0; i < (*s)->num_units(); ++i)
    for (size_t k = 0; k < (*s)->unit(i).numel; ++k) (*s)->unit(i).master[k] = d(rng);
  return std::move(s).value();
}

void expect_masters(const HostStore& a, const HostStore& b, bool bf16_rounded) {
  for (size_t i = 0; i < a.num_units(); ++i)
    for (size_t k = 0; k < a.unit(i).numel; ++k) {
      const float want = bf16_rounded ? bf16_to_float(float_to_bf16(a.unit(i).master[k])) : a.unit(i).master[k];
      ASSERT_EQ(b.unit(i).master[k], want) << "unit " << i << " element " << k;
    }
}

TEST(HfIo, ExportImportShardedExact) {
  for (bool tied : {true, false}) {
    TempDir dir;
    ModelConfig cfg = config(tied, /*bias=*/!tied);
    // a transformers-5 source config's dtype: transformers 5 reads it first, so it must be the export's
    cfg.raw = Json::object({{"dtype", "bfloat16"}});
    auto a = random_store(cfg, 1);
    ASSERT_TRUE(export_hf_model(dir.path, cfg, *a, false, 300'000).ok());
    auto index = Json::parse(*read_file(dir / "model.safetensors.index.json"));
    ASSERT_TRUE(index.ok());
    EXPECT_EQ(index->find("metadata")->find("total_size")->as_int(), cfg.num_params() * 4);
    EXPECT_EQ(index->find("weight_map")->find("lm_head.weight") != nullptr, !tied);
    auto saved = load_model_config(dir / "config.json");
    ASSERT_TRUE(saved.ok()) << saved.status().to_string();
    EXPECT_EQ(saved->raw.find("torch_dtype")->as_string(), "float32");
    EXPECT_EQ(saved->raw.find("dtype")->as_string(), "float32");
    EXPECT_EQ(saved->tie_word_embeddings, tied);
    EXPECT_EQ(saved->num_params(), cfg.num_params());
    auto b = random_store(cfg, 2, /*shadow=*/true);
    Status s = load_hf_weights(dir.path, cfg, *b);
    ASSERT_TRUE(s.ok()) << s.to_string();
    expect_masters(*a, *b, false);
    for (size_t i = 0; i < b->num_units(); ++i)
      for (size_t k = 0; k < b->unit(i).numel; ++k)
        ASSERT_EQ(b->unit(i).shadow[k].bits, float_to_bf16(b->unit(i).master[k]).bits);
  }
}

// Non-finite weights in a model directory are refused at load naming the tensor; they used to
// surface as "loss is not finite" at step 1, naming nothing.
TEST(HfIo, ANonFiniteWeightIsRefusedAtLoadNamingTheTensor) {
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    TempDir dir;
    const ModelConfig cfg = config(true);
    auto a = random_store(cfg, 5);
    a->unit(1).master[7] = bad;  // the first decoder layer's first tensor
    ASSERT_TRUE(export_hf_model(dir.path, cfg, *a, false, 0).ok());
    auto b = random_store(cfg, 6);
    const Status s = load_hf_weights(dir.path, cfg, *b);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("weight 'model.layers.0."), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find("at element 7 of its part 0"), std::string::npos) << s.to_string();
  }
}

TEST(HfIo, ExportBf16SingleFile) {
  TempDir dir;
  const ModelConfig cfg = config(true);
  auto a = random_store(cfg, 3);
  ASSERT_TRUE(export_hf_model(dir.path, cfg, *a, true, 0).ok());
  EXPECT_TRUE(fs::exists(dir / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));
  EXPECT_EQ(load_model_config(dir / "config.json")->raw.find("torch_dtype")->as_string(), "bfloat16");
  EXPECT_EQ(load_model_config(dir / "config.json")->raw.find("dtype")->as_string(), "bfloat16");
  auto f = SafetensorsFile::open(dir / "model.safetensors");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->header().metadata.at("format"), "pt");
  EXPECT_EQ((*f)->find("model.embed_tokens.weight")->dtype, DType::kBF16);
  auto b = random_store(cfg, 4);
  ASSERT_TRUE(load_hf_weights(dir.path, cfg, *b).ok());
  expect_masters(*a, *b, true);
  // Re-exporting sharded into the same directory removes the old single file.
  ASSERT_TRUE(export_hf_model(dir.path, cfg, *a, false, 300'000, /*overwrite=*/true).ok());
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
  ASSERT_TRUE(load_hf_weights(dir.path, cfg, *b).ok());
  expect_masters(*a, *b, false);
}

// Writes the tensors of `cfg` from `store` into dir/model.safetensors, edited by `edit`.
void write_model(const std::string& path, const ModelConfig& cfg, const HostStore& store,
                 const std::function<void(std::vector<WriteTensor>&)>& edit) {
  std::vector<WriteTensor> ts;
  const auto units = build_param_schemas(cfg);
  for (size_t i = 0; i < units.size(); ++i)
    for (const auto& t : units[i].tensors)
      ts.push_back({t.name, t.shape, DType::kF32, store.unit(i).master + t.offset, DType::kF32});
  edit(ts);
  ASSERT_TRUE(write_safetensors(path, ts).ok());
}

TEST(HfIo, TiedModelIgnoresLmHeadAndInvFreq) {
  TempDir dir;
  const ModelConfig cfg = config(true);
  auto a = random_store(cfg, 5);
  write_model(dir / "model.safetensors", cfg, *a, [&](std::vector<WriteTensor>& ts) {
    ts.push_back({"lm_head.weight", {cfg.vocab_size, cfg.hidden_size}, DType::kF32, a->unit(0).master, DType::kF32});
    ts.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", {cfg.head_dim / 2}, DType::kF32, a->unit(1).master,
                  DType::kF32});
  });
  auto b = random_store(cfg, 6);
  Status s = load_hf_weights(dir.path, cfg, *b);
  ASSERT_TRUE(s.ok()) << s.to_string();
  expect_masters(*a, *b, false);
}

// A tied config beside a file whose lm_head differs from its embedding: transformers 5 keeps
// that head, 4 drops it — refused naming both, never the head silently dropped.
TEST(HfIo, ATiedConfigRefusesAFileWhoseHeadDiffersFromItsEmbedding) {
  TempDir dir;
  const ModelConfig cfg = config(true);
  auto a = random_store(cfg, 5);
  std::vector<float> head(a->unit(0).master, a->unit(0).master + size_t(cfg.vocab_size) * cfg.hidden_size);
  head.back() += 1;  // one value apart
  write_model(dir / "model.safetensors", cfg, *a, [&](std::vector<WriteTensor>& ts) {
    ts.push_back({"lm_head.weight", {cfg.vocab_size, cfg.hidden_size}, DType::kF32, head.data(), DType::kF32});
  });
  auto b = random_store(cfg, 6);
  Status s = load_hf_weights(dir.path, cfg, *b);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("lm_head.weight"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("tie_word_embeddings"), std::string::npos) << s.message();
}

TEST(HfIo, ListsMissingUnexpectedAndMisshaped) {
  TempDir dir;
  const ModelConfig cfg = config(false);
  auto a = random_store(cfg, 7);
  write_model(dir / "model.safetensors", cfg, *a, [&](std::vector<WriteTensor>& ts) {
    std::erase_if(ts, [](const WriteTensor& t) {
      return t.name == "lm_head.weight" || t.name == "model.layers.1.self_attn.k_proj.weight";
    });
    for (auto& t : ts)
      if (t.name == "model.layers.3.mlp.down_proj.weight") t.shape = {t.shape[1], t.shape[0]};
    ts.push_back({"model.layers.0.mlp.extra", {2}, DType::kF32, a->unit(1).master, DType::kF32});
  });
  auto b = random_store(cfg, 8);
  const float before = b->unit(0).master[0];
  Status s = load_hf_weights(dir.path, cfg, *b);
  ASSERT_FALSE(s.ok());
  for (const char* name : {"lm_head.weight", "model.layers.1.self_attn.k_proj.weight", "model.layers.0.mlp.extra",
                           "model.layers.3.mlp.down_proj.weight [384, 128] (expected [128, 384])"})
    EXPECT_NE(s.message().find(name), std::string::npos) << name << " in: " << s.message();
  EXPECT_EQ(b->unit(0).master[0], before);
  TempDir empty;
  EXPECT_EQ(load_hf_weights(empty.path, cfg, *b).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace mt

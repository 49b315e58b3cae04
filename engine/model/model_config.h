// ModelConfig: one decoder-only transformer read from a Hugging Face config.json — the Llama
// shape plus the variants by which the families differ from it (engine/model/families.cc says
// which family sets which). Anything we do not implement is refused with a message naming the
// field; nothing is silently ignored.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/base/json.h"
#include "engine/base/status.h"
#include "kernels/moe.h"
#include "kernels/swiglu.h"

namespace mt {

struct RopeScaling {
  std::string type = "default";  // default | linear | llama3 | yarn
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;  // yarn: max_position_embeddings when absent
  // yarn (transformers' _compute_yarn_parameters): the ramp between beta_fast and beta_slow
  // rotations, and the attention factor (given, or from mscale / mscale_all_dim, or 0.1 ln s + 1).
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;          // 0 = absent
  double mscale_all_dim = 0.0;  // 0 = absent
  double attention_factor = 0.0;  // 0 = absent (inferred)
  bool truncate = true;
  bool operator==(const RopeScaling&) const = default;
};

// The largest dimensions a config may have: generous bounds on real decoder models (Llama 3.1
// 405B has hidden 16384, 126 layers, 128 heads, head_dim 128, FFN 53248; the largest
// vocabularies are ~262k). A config beyond them is refused naming the field and the limit, so
// no config can make the planner, the daemon or an executor allocate without bound.
struct ModelLimits {
  static constexpr int kHiddenSize = 65536;
  static constexpr int kLayers = 1024;
  static constexpr int kHeads = 1024;  // attention and key/value heads
  static constexpr int kHeadDim = 1024;
  static constexpr int kIntermediateSize = 262144;
  static constexpr int kVocabSize = 1 << 20;
  static constexpr int kMaxPositions = 1 << 30;
  static constexpr int kExperts = 4096;  // per MoE layer (the largest real models have a few hundred)
};

// Where a decoder layer's RMSNorms sit around its two branches (attention, MLP):
//   kPre        x + f(norm(x))          Llama, Mistral, Qwen, Phi
//   kPreAndPost x + norm'(f(norm(x)))   Gemma 2/3 (input, post-attention, pre- and post-feedforward)
//   kPost       x + norm(f(x))          OLMo 2 (post-attention and post-feedforward only)
enum class NormPlacement { kPre, kPreAndPost, kPost };
// RMSNorm of the queries and keys before RoPE: none, per head over head_dim (Qwen3, Gemma 3),
// or over each whole projection (OLMo 2).
enum class QkNorm { kNone, kPerHead, kWhole };

// How one layer's attention differs from full causal attention with the model's RoPE table.
struct LayerAttention {
  int window = 0;           // sliding window in keys (kernels/attention.h), 0 = full causal
  bool local_rope = false;  // rotates by the local RoPE table (Gemma 3's sliding layers)
  bool operator==(const LayerAttention&) const = default;
};

// A mixture-of-experts MLP (Mixtral, Qwen2/3-MoE, gpt-oss): a router sends each token to top_k
// of num_experts gated MLPs of width expert_ffn and sums their outputs by the router's weights
// (kernels/moe.h); Qwen2-MoE adds a shared expert (the layer's dense MLP, of width shared_ffn)
// scaled by a sigmoid gate. Each expert is a streamed unit of its own (param_schema.h).
// How the family names its tensors in Hugging Face files (param_schema.cc).
enum class MoeNames { kMixtral, kQwen, kGptOss };
struct MoeConfig {
  int num_experts = 0;  // 0: a dense model
  int top_k = 0;
  int expert_ffn = 0;
  RouterKind router = RouterKind::kSoftmaxTopK;
  bool renormalize = false;  // the top-k weights scaled to sum 1 (kSoftmaxTopK)
  bool router_bias = false;  // gpt-oss
  bool expert_bias = false;  // biases on the experts' projections (gpt-oss)
  int shared_ffn = 0;        // Qwen2-MoE's shared expert, with its sigmoid gate; 0: none
  // The load-balancing loss's weight (router_aux_loss_coef when the config turns the loss on with
  // output_router_logits, as transformers adds it to the loss only then); 0: not trained on.
  double aux_coef = 0;
  MoeNames names = MoeNames::kQwen;
  // The Hugging Face files hold the experts as MXFP4 blocks and scales (gpt-oss's hub checkpoints,
  // quantization_config {"quant_method": "mxfp4"}): dequantized into the fp32 masters on load.
  bool mxfp4 = false;
  std::vector<char> dense_layers;  // per layer: 1 = a dense MLP (Qwen's mlp_only_layers); empty: none
  bool operator==(const MoeConfig&) const = default;
};

struct ModelConfig {
  std::string architecture;   // e.g. "LlamaForCausalLM"
  std::string model_type;     // e.g. "llama"
  int hidden_size = 0;        // C
  int num_layers = 0;         // L
  int num_heads = 0;          // H
  int num_kv_heads = 0;       // KVH (GQA when < H)
  int head_dim = 0;           // D
  int intermediate_size = 0;  // F
  int vocab_size = 0;         // V
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  // Multiplies RoPE's cos and sin (so q.k by its square): YaRN's attention factor, else 1.
  double rope_attention_factor = 1.0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projection biases (Qwen2)
  bool o_bias = false;          // the output projection's bias (gpt-oss)
  bool attention_sinks = false; // a learned logit per head in every softmax (gpt-oss; kernels/attention.h)
  double initializer_range = 0.02;
  // transformers builds the embedding with padding_idx = pad_token_id: that row gets no gradient
  // there. We train it like any row; the job says so (JobRunner) when the config sets one.
  int64_t pad_token_id = -1;  // -1: none

  // The family's variants (Llama's values by default).
  NormPlacement norm_placement = NormPlacement::kPre;
  float norm_offset = 0;               // RMSNorms scale by w + offset: Gemma's 1 + w
  QkNorm qk_norm = QkNorm::kNone;
  double attention_scale = 0;          // 0: 1/sqrt(head_dim); Gemma: query_pre_attn_scalar^-1/2
  double attention_softcap = 0;        // scores -> cap * tanh(scores / cap) (Gemma 2), 0: none
  double final_softcap = 0;            // the LM head's logits likewise (Gemma 2), 0: none
  Activation activation;               // the MLP's (and experts') gate activation
  double embedding_scale = 1;          // the embedding's output times this: Gemma's sqrt(hidden_size)
  bool fused_projections = false;      // Phi-3: one qkv_proj and one gate_up_proj tensor
  double rope_local_theta = 0;         // the local RoPE table's base (Gemma 3), 0: no local table
  static constexpr double kDefaultLocalTheta = 10000;  // transformers' default_theta["local"] (Gemma 3)
  std::vector<LayerAttention> layers;  // per layer; empty: every layer full causal, global RoPE
  MoeConfig moe;                       // num_experts 0: every layer's MLP is dense
  Json raw;                            // the config.json as read, for export

  LayerAttention layer_attention(int l) const { return layers.empty() ? LayerAttention{} : layers[size_t(l)]; }
  // The same layer shape n times (benches): the first n layers' attention, the pattern repeated
  // past the original depth.
  void set_num_layers(int n);
  bool has_experts() const { return moe.num_experts > 0; }
  // Layer l's MLP is a mixture of experts (else dense, of width intermediate_size).
  bool is_moe_layer(int l) const {
    return has_experts() && (moe.dense_layers.empty() || !moe.dense_layers[size_t(l)]);
  }
  int num_moe_layers() const;
  int max_dense_ffn() const;  // the widest dense MLP of any layer (0: none)
  // The width of layer l's dense MLP: intermediate_size, or an MoE layer's shared expert's (0: none).
  int dense_ffn(int l) const { return is_moe_layer(l) ? moe.shared_ffn : intermediate_size; }
  bool pre_norms() const { return norm_placement != NormPlacement::kPost; }
  bool post_norms() const { return norm_placement != NormPlacement::kPre; }
  int q_norm_width() const { return qk_norm == QkNorm::kWhole ? q_dim() : head_dim; }
  int k_norm_width() const { return qk_norm == QkNorm::kWhole ? kv_dim() : head_dim; }

  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }
  int qkv_dim() const { return q_dim() + 2 * kv_dim(); }
  int64_t num_params() const;
  // The parameters one token passes through: all but the experts its router does not pick (each
  // MoE layer's top_k of num_experts).
  int64_t num_active_params() const;
};

// Parses and validates a config.json text; `source` names it in messages.
Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source);
Result<ModelConfig> load_model_config(const std::string& path);  // a file or a model directory
Result<ModelConfig> preset_config(const std::string& name);     // a built-in preset
// Model FLOPs of training on one token of a seq_len sequence: 6 x the matmul parameters (every
// projection and the LM head; the embedding lookup is no matmul) + causal attention, 12 x q_dim
// per (query, key) pair (QK^T and PV, forward and twice for backward): 6 x layers x seq_len x
// q_dim without windows (half the keys on average), fewer on a layer with a sliding window (each
// query sees at most its window: Gemma 2/3, gpt-oss, windowed Mistral) and, with doc_len > 0,
// in packed documents of doc_len tokens (attention within each).
double model_flops_per_token(const ModelConfig& c, int seq_len, int doc_len = 0);
std::vector<std::string> preset_names();

// The config as an HF config.json (the original keys plus ours), for export.
Json model_config_to_json(const ModelConfig& cfg);

// Rotary inverse frequencies, with the config's rope scaling applied: [head_dim / 2], followed
// by the local table's [head_dim / 2] (default RoPE, base rope_local_theta) when it has one.
std::vector<float> rope_inv_freq(const ModelConfig& cfg);

}  // namespace mt

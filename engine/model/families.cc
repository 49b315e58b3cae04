#include "engine/model/families.h"

#include <algorithm>
#include <cmath>
#include <string_view>

namespace mt {
namespace {

// A family's variant reader: sets the ModelConfig fields in which the family differs from Llama.
using Variants = Status (*)(const ConfigReader&, ModelConfig&);

struct Family {
  const char* architecture;
  std::vector<std::string_view> own_keys;  // of kFamilyKeys, the ones this family reads
  // transformers' defaults for keys the file may leave out (configuration_*.py, 4.x and 5.x).
  double rms_norm_eps;
  int kv_heads;  // 0: as many as the heads
  bool tied;     // tie_word_embeddings
  int head_dim;  // 0: hidden_size / heads
  Variants variants;
  double rope_theta = 10000;            // default_theta
  const char* default_rope = nullptr;   // the RoPE object when the file has none (gpt-oss: YaRN)
};

bool is_null(const Json* v) { return !v || v->is_null(); }

// "hidden_act" (or Gemma's "hidden_activation") must name the activation the family's MLP uses
// and we implement.
Status read_activation(const ConfigReader& r, const char* field, ModelConfig& c) {
  const Json* v = r.get(field);
  if (is_null(v)) return Status::Ok();
  // "swish" is transformers' other name for SiLU (ACT2FN: nn.SiLU)
  if (v->is_string() && (v->as_string() == "silu" || v->as_string() == "swish"))
    return c.activation = GateActivation::kSilu, Status::Ok();
  if (v->is_string() && v->as_string() == "gelu_pytorch_tanh")
    return c.activation = GateActivation::kGeluTanh, Status::Ok();
  return r.fail(field, "is " + v->dump() + "; supported: \"silu\" (SwiGLU), \"gelu_pytorch_tanh\" (GeGLU)");
}

// sliding_window in keys: null = none (0); `absent` when the key is missing (the family's default).
Result<int> read_window(const ConfigReader& r, int absent = 0) {
  const char* field = "sliding_window";
  const Json* v = r.get(field);
  if (!v) return absent;
  if (v->is_null()) return 0;
  if (!v->is_integer() || v->as_int() <= 0 || v->as_int() > ModelLimits::kMaxPositions)
    return r.fail(field, "must be null or a positive number of tokens, got " + v->dump());
  return int(v->as_int());
}

// Every layer with window w.
void every_layer(ModelConfig& c, int w) {
  c.layers.assign(size_t(c.num_layers), LayerAttention{w, false});
  if (w == 0) c.layers.clear();
}

// transformers 5's layer_types, when present, says which layers slide (by `window`) — and
// overrides what the family would derive from its other keys.
Result<bool> read_layer_types(const ConfigReader& r, ModelConfig& c, int window, bool local_rope) {
  const Json* types = r.get("layer_types");
  if (is_null(types)) return false;
  if (!types->is_array() || types->items().size() != size_t(c.num_layers))
    return r.fail("layer_types", "must list one attention type for each of the " + std::to_string(c.num_layers) + " layers");
  c.layers.assign(size_t(c.num_layers), LayerAttention{});
  for (size_t i = 0; i < types->items().size(); ++i) {
    const Json& t = types->items()[i];
    const std::string field = "layer_types[" + std::to_string(i) + "]";
    if (t.is_string() && t.as_string() == "full_attention") continue;
    if (!(t.is_string() && t.as_string() == "sliding_attention"))
      return r.fail(field, "is " + t.dump() + "; supported: \"full_attention\", \"sliding_attention\"");
    if (window == 0) return r.fail(field, "is " + t.dump() + ", but " + c.architecture + " has no sliding_window set");
    c.layers[i] = LayerAttention{window, local_rope};
  }
  return true;
}

// Families whose attention in transformers slides on every layer when sliding_window is set and
// never reads layer_types (Mixtral, Phi-3): a layer_types saying otherwise is refused, since
// transformers would ignore it and train a different model than the file seems to describe.
Status layer_types_unread(const ConfigReader& r, const ModelConfig& c, int window) {
  const Json* types = r.get("layer_types");
  if (is_null(types)) return Status::Ok();
  const char* every = window > 0 ? "sliding_attention" : "full_attention";
  bool agrees = types->is_array();
  for (size_t i = 0; agrees && i < types->items().size(); ++i)
    agrees = types->items()[i].is_string() && types->items()[i].as_string() == every;
  if (agrees) return Status::Ok();
  return r.fail("layer_types", "is " + types->dump() + ", which transformers does not read for " + c.architecture +
                                   ": every layer's attention is " +
                                   (window > 0 ? "sliding (sliding_window)" : "full (no sliding_window)") +
                                   "; remove it, or make it say so");
}

Status refuse_true(const ConfigReader& r, const char* field, const std::string& why) {
  const Json* v = r.get(field);
  if (v && !(v->is_null() || (v->is_bool() && !v->as_bool()))) return r.fail(field, "is " + v->dump() + ": " + why);
  return Status::Ok();
}

Status refuse_non_null(const ConfigReader& r, const char* field, const std::string& why) {
  const Json* v = r.get(field);
  if (!is_null(v)) return r.fail(field, "is " + v->dump() + ": " + why);
  return Status::Ok();
}

// A randomising option (dropout, router jitter) must be 0: training without it would be a
// different model. `what` names it in the refusal.
Status refuse_nonzero(const ConfigReader& r, const char* field, const char* what = "dropout") {
  const Json* v = r.get(field);
  if (is_null(v) || (v->is_number() && v->as_double() == 0)) return Status::Ok();
  return r.fail(field, "is " + v->dump() + "; " + what + " is not implemented (only 0)");
}

Status no_sliding_window(const ConfigReader& r) {
  return refuse_non_null(r, "sliding_window", "this family has no sliding-window attention in transformers");
}

Status llama(const ConfigReader& r, ModelConfig& c) {
  MT_RETURN_IF_ERROR(read_activation(r, "hidden_act", c));
  MT_RETURN_IF_ERROR(refuse_true(r, "attention_bias", "biases on q/k/v/o are not supported for " + c.architecture));
  MT_RETURN_IF_ERROR(no_sliding_window(r));
  MT_ASSIGN_OR_RETURN(bool typed, read_layer_types(r, c, 0, false));
  (void)typed;
  return Status::Ok();
}

// MistralConfig's sliding_window: absent means 4096 on every layer, null none.
Status mistral(const ConfigReader& r, ModelConfig& c) {
  MT_RETURN_IF_ERROR(read_activation(r, "hidden_act", c));
  MT_RETURN_IF_ERROR(refuse_true(r, "attention_bias", "biases on q/k/v/o are not supported for " + c.architecture));
  MT_ASSIGN_OR_RETURN(const int w, read_window(r, 4096));
  MT_ASSIGN_OR_RETURN(bool typed, read_layer_types(r, c, w, false));
  if (!typed) every_layer(c, w);
  return Status::Ok();
}

// An integer key >= 0 and <= max (absent: `out` unchanged).
Status count_key(const ConfigReader& r, const char* field, int& out, int max) {
  const Json* v = r.get(field);
  if (is_null(v)) return Status::Ok();
  if (!v->is_integer() || v->as_int() < 0 || v->as_int() > max)
    return r.fail(field, "must be an integer in 0.." + std::to_string(max) + ", got " + v->dump());
  out = int(v->as_int());
  return Status::Ok();
}

// Qwen2/Qwen3: a window (4096 when absent) only with use_sliding_window, on the layers from
// max_window_layers (28 when absent) on.
Status qwen_windows(const ConfigReader& r, ModelConfig& c) {
  bool use = false;
  MT_RETURN_IF_ERROR(r.boolean("use_sliding_window", use));
  int w = 0;
  if (use) {
    MT_ASSIGN_OR_RETURN(w, read_window(r, 4096));
  }
  MT_ASSIGN_OR_RETURN(bool typed, read_layer_types(r, c, w, false));
  if (typed || w == 0) return Status::Ok();
  int from = 28;  // 0: every layer slides, as transformers makes it
  MT_RETURN_IF_ERROR(count_key(r, "max_window_layers", from, ModelLimits::kLayers));
  c.layers.assign(size_t(c.num_layers), LayerAttention{});
  for (int l = from; l < c.num_layers; ++l) c.layers[size_t(l)].window = w;
  return Status::Ok();
}

Status qwen2(const ConfigReader& r, ModelConfig& c) {
  MT_RETURN_IF_ERROR(read_activation(r, "hidden_act", c));
  c.attention_bias = true;  // Qwen2 always has q/k/v biases (and none on o)
  return qwen_windows(r, c);
}

Status qwen3(const ConfigReader& r, ModelConfig& c) {
  MT_RETURN_IF_ERROR(read_activation(r, "hidden_act", c));
  MT_RETURN_IF_ERROR(refuse_true(r, "attention_bias", "biases on q/k/v/o (o_proj's too) are not supported"));
  c.qk_norm = QkNorm::kPerHead;
  return qwen_windows(r, c);
}

// Phi-3 / Phi-4: Llama's blocks with fused projection tensors and an optional window.
Status phi3(const ConfigReader& r, ModelConfig& c) {
  MT_RETURN_IF_ERROR(read_activation(r, "hidden_act", c));
  MT_RETURN_IF_ERROR(refuse_true(r, "attention_bias", "biases on qkv/o are not supported"));
  MT_RETURN_IF_ERROR(refuse_nonzero(r, "resid_pdrop"));
  MT_RETURN_IF_ERROR(refuse_nonzero(r, "embd_pdrop"));
  c.fused_projections = true;
  // transformers' Phi3Config.validate_rope: only the default RoPE or longrope (not supported here)
  if (c.rope_scaling.type != "default")
    return r.fail("rope_type", "is '" + c.rope_scaling.type + "', which transformers refuses for " +
                                      c.architecture + " (only default and longrope)");
  MT_ASSIGN_OR_RETURN(const int w, read_window(r));
  MT_RETURN_IF_ERROR(layer_types_unread(r, c, w));
  every_layer(c, w);
  return Status::Ok();
}

// OLMo 2: norms on the branch outputs, q/k norms over the whole projections.
Status olmo2(const ConfigReader& r, ModelConfig& c) {
  MT_RETURN_IF_ERROR(read_activation(r, "hidden_act", c));
  MT_RETURN_IF_ERROR(refuse_true(r, "attention_bias", "biases on q/k/v/o are not supported"));
  MT_RETURN_IF_ERROR(refuse_non_null(r, "clip_qkv", "clipping q/k/v is not implemented"));
  MT_RETURN_IF_ERROR(no_sliding_window(r));
  c.norm_placement = NormPlacement::kPost;
  c.qk_norm = QkNorm::kWhole;
  MT_ASSIGN_OR_RETURN(bool typed, read_layer_types(r, c, 0, false));
  (void)typed;
  return Status::Ok();
}

// A soft cap: null = none (0), a positive number, or `absent` when the key is missing.
Result<double> read_softcap(const ConfigReader& r, const char* field, double absent) {
  const Json* v = r.get(field);
  if (!v) return absent;
  if (v->is_null()) return 0.0;
  if (!v->is_number() || !(v->as_double() > 0)) return r.fail(field, "must be null or a positive number, got " + v->dump());
  return v->as_double();
}

// What Gemma 2 and Gemma 3 share: pre- and post-norms with 1 + w, GeGLU, the embedding scaled
// by sqrt(hidden_size), query_pre_attn_scalar, soft caps (transformers' defaults differ). Their
// MLPs read hidden_activation only: a hidden_act beside it (the hub's files carry both) is not read.
Status gemma_common(const ConfigReader& r, ModelConfig& c, double attn_softcap, double final_softcap) {
  c.activation = GateActivation::kGeluTanh;
  MT_RETURN_IF_ERROR(read_activation(r, "hidden_activation", c));
  MT_RETURN_IF_ERROR(refuse_true(r, "attention_bias", "biases on q/k/v/o are not supported"));
  MT_RETURN_IF_ERROR(refuse_true(r, "use_bidirectional_attention", "only causal attention is supported"));
  MT_ASSIGN_OR_RETURN(c.attention_softcap, read_softcap(r, "attn_logit_softcapping", attn_softcap));
  MT_ASSIGN_OR_RETURN(c.final_softcap, read_softcap(r, "final_logit_softcapping", final_softcap));
  c.norm_placement = NormPlacement::kPreAndPost;
  c.norm_offset = 1;
  c.embedding_scale = std::sqrt(double(c.hidden_size));
  double scalar = 256;
  MT_RETURN_IF_ERROR(r.number("query_pre_attn_scalar", scalar));
  c.attention_scale = 1.0 / std::sqrt(scalar);
  return Status::Ok();
}

// Gemma 2: soft caps of 50 (attention) and 30 (final logits) unless set; every other layer
// (the even ones) slides.
Status gemma2(const ConfigReader& r, ModelConfig& c) {
  MT_RETURN_IF_ERROR(gemma_common(r, c, 50.0, 30.0));
  MT_ASSIGN_OR_RETURN(const int w, read_window(r, 4096));
  MT_ASSIGN_OR_RETURN(bool typed, read_layer_types(r, c, w, false));
  if (typed) return Status::Ok();
  c.layers.assign(size_t(c.num_layers), LayerAttention{});
  for (int l = 0; l < c.num_layers; l += 2) c.layers[size_t(l)].window = w;
  return Status::Ok();
}

// Gemma 3 (text): Gemma's blocks with per-head q/k norms, no soft caps unless set, and local
// sliding layers (every sliding_window_pattern-th layer global) with their own RoPE base.
Status gemma3(const ConfigReader& r, ModelConfig& c) {
  MT_RETURN_IF_ERROR(refuse_non_null(r, "attn_logit_softcapping",
                                     "transformers' Gemma 3 attention does not apply it (Gemma 2's does); set it to null"));
  MT_RETURN_IF_ERROR(gemma_common(r, c, 0.0, 0.0));
  c.qk_norm = QkNorm::kPerHead;
  if (c.rope_local_theta == 0) c.rope_local_theta = ModelConfig::kDefaultLocalTheta;
  MT_RETURN_IF_ERROR(r.number("rope_local_base_freq", c.rope_local_theta));
  MT_ASSIGN_OR_RETURN(const int w, read_window(r, 4096));
  MT_ASSIGN_OR_RETURN(bool typed, read_layer_types(r, c, w, true));
  if (typed) return Status::Ok();
  // transformers derives the types from sliding_window_pattern (6 when absent); the
  // _sliding_window_pattern it writes beside layer_types is then not read.
  int pattern = 6, written = 6;
  MT_RETURN_IF_ERROR(r.positive_int("sliding_window_pattern", pattern, ModelLimits::kLayers, false));
  MT_RETURN_IF_ERROR(r.positive_int("_sliding_window_pattern", written, ModelLimits::kLayers, false));
  if (r.get("_sliding_window_pattern") && written != pattern)
    return r.fail("_sliding_window_pattern", "disagrees with sliding_window_pattern (" + std::to_string(pattern) +
                                                 ", which transformers reads) and layer_types is absent");
  c.layers.assign(size_t(c.num_layers), LayerAttention{});
  for (int l = 0; l < c.num_layers; ++l)
    if ((l + 1) % pattern != 0) c.layers[size_t(l)] = LayerAttention{w, true};
  return Status::Ok();
}

// ---- mixtures of experts -------------------------------------------------------------------------

// What every MoE family shares: the experts (num_local_experts or num_experts: transformers writes
// Qwen3-MoE's num_experts as num_local_experts, its attribute_map; both must agree when both are
// given) and the router's k, the load-balancing loss (trained on only when output_router_logits
// is true, as transformers adds it to the loss only then), no router jitter; the experts' width.
Status read_moe(const ConfigReader& r, ModelConfig& c, int experts, int top_k, int ffn) {
  MoeConfig& m = c.moe;
  m.num_experts = experts, m.top_k = top_k, m.expert_ffn = ffn;
  int local = -1, plain = -1;
  MT_RETURN_IF_ERROR(count_key(r, "num_local_experts", local, ModelLimits::kExperts));
  MT_RETURN_IF_ERROR(count_key(r, "num_experts", plain, ModelLimits::kExperts));
  if (local >= 0 && plain >= 0 && local != plain)
    return r.fail("num_local_experts", "(" + std::to_string(local) + ") and num_experts (" + std::to_string(plain) + ") disagree");
  if (local >= 0) m.num_experts = local;
  if (plain >= 0) m.num_experts = plain;
  MT_RETURN_IF_ERROR(count_key(r, "num_experts_per_tok", m.top_k, ModelLimits::kExperts));
  if (m.num_experts > 0 && (m.top_k < 1 || m.top_k > m.num_experts))
    return r.fail("num_experts_per_tok", "= " + std::to_string(m.top_k) + " must be in 1.." + std::to_string(m.num_experts));
  bool aux = false;
  double coef = 0.001;
  MT_RETURN_IF_ERROR(r.boolean("output_router_logits", aux));
  if (const Json* v = r.get("router_aux_loss_coef"); !is_null(v)) {
    if (!v->is_number() || v->as_double() < 0) return r.fail("router_aux_loss_coef", "must be a number >= 0, got " + v->dump());
    coef = v->as_double();
  }
  m.aux_coef = aux ? coef : 0;
  return refuse_nonzero(r, "router_jitter_noise", "router jitter");
}

// Qwen's MoE layers: every decoder_sparse_step-th layer not listed in mlp_only_layers.
Status read_qwen_moe_layers(const ConfigReader& r, ModelConfig& c) {
  int step = 1;
  MT_RETURN_IF_ERROR(r.positive_int("decoder_sparse_step", step, ModelLimits::kLayers, false));
  c.moe.dense_layers.assign(size_t(c.num_layers), 0);
  for (int l = 0; l < c.num_layers; ++l) c.moe.dense_layers[size_t(l)] = (l + 1) % step != 0;
  const Json* only = r.get("mlp_only_layers");
  if (!is_null(only)) {
    if (!only->is_array()) return r.fail("mlp_only_layers", "must be a list of layer indices");
    for (const Json& v : only->items()) {
      if (!v.is_integer() || v.as_int() < 0 || v.as_int() >= c.num_layers)
        return r.fail("mlp_only_layers", "lists " + v.dump() + ", not a layer of " + std::to_string(c.num_layers));
      c.moe.dense_layers[size_t(v.as_int())] = 1;
    }
  }
  return r.positive_int("moe_intermediate_size", c.moe.expert_ffn, ModelLimits::kIntermediateSize, false);
}

// Qwen2/3-MoE's sliding windows follow another pattern than Qwen2's; not implemented.
Status no_qwen_moe_windows(const ConfigReader& r) {
  MT_RETURN_IF_ERROR(refuse_true(r, "use_sliding_window", "sliding windows are not implemented for this family"));
  return Status::Ok();
}

// Mixtral: softmax router, the top k renormalised; experts of intermediate_size.
Status mixtral(const ConfigReader& r, ModelConfig& c) {
  MT_RETURN_IF_ERROR(read_activation(r, "hidden_act", c));
  MT_RETURN_IF_ERROR(refuse_true(r, "attention_bias", "biases on q/k/v/o are not supported for " + c.architecture));
  MT_ASSIGN_OR_RETURN(const int w, read_window(r));  // Mistral's attention, no window unless set
  MT_RETURN_IF_ERROR(layer_types_unread(r, c, w));
  every_layer(c, w);
  MT_RETURN_IF_ERROR(read_moe(r, c, 8, 2, c.intermediate_size));
  c.moe.renormalize = true;
  c.moe.names = MoeNames::kMixtral;
  return Status::Ok();
}

// Qwen2-MoE: q/k/v biases (qkv_bias), a shared expert with a sigmoid gate in every MoE layer.
Status qwen2_moe(const ConfigReader& r, ModelConfig& c) {
  MT_RETURN_IF_ERROR(read_activation(r, "hidden_act", c));
  c.attention_bias = true;
  MT_RETURN_IF_ERROR(r.boolean("qkv_bias", c.attention_bias));
  MT_RETURN_IF_ERROR(no_qwen_moe_windows(r));
  MT_ASSIGN_OR_RETURN(bool typed, read_layer_types(r, c, 0, false));
  (void)typed;
  MT_RETURN_IF_ERROR(read_moe(r, c, 60, 4, 1408));
  MT_RETURN_IF_ERROR(r.boolean("norm_topk_prob", c.moe.renormalize));
  MT_RETURN_IF_ERROR(read_qwen_moe_layers(r, c));
  c.moe.shared_ffn = 5632;
  MT_RETURN_IF_ERROR(r.positive_int("shared_expert_intermediate_size", c.moe.shared_ffn, ModelLimits::kIntermediateSize, false));
  return Status::Ok();
}

// Qwen3-MoE: Qwen3's attention (per-head q/k norms) with Qwen's MoE layers, no shared expert.
Status qwen3_moe(const ConfigReader& r, ModelConfig& c) {
  MT_RETURN_IF_ERROR(read_activation(r, "hidden_act", c));
  MT_RETURN_IF_ERROR(refuse_true(r, "attention_bias", "biases on q/k/v/o are not supported"));
  MT_RETURN_IF_ERROR(no_qwen_moe_windows(r));
  MT_ASSIGN_OR_RETURN(bool typed, read_layer_types(r, c, 0, false));
  (void)typed;
  c.qk_norm = QkNorm::kPerHead;
  MT_RETURN_IF_ERROR(read_moe(r, c, 128, 8, 768));
  MT_RETURN_IF_ERROR(r.boolean("norm_topk_prob", c.moe.renormalize));
  return read_qwen_moe_layers(r, c);
}

// gpt-oss: attention with biases (o_proj's too) and sinks, alternating sliding and full layers;
// a biased router whose top k logits are softmaxed; experts with biases and the clamped SwiGLU.
// Its hidden_act is not read by transformers (the experts' activation is fixed): only "silu".
Status gpt_oss(const ConfigReader& r, ModelConfig& c) {
  if (const Json* act = r.get("hidden_act"); !is_null(act) && !(act->is_string() && act->as_string() == "silu"))
    return r.fail("hidden_act", "is " + act->dump() + "; gpt-oss's experts use their clamped SwiGLU (\"silu\")");
  bool bias = true;
  MT_RETURN_IF_ERROR(r.boolean("attention_bias", bias));
  c.attention_bias = c.o_bias = bias;
  c.attention_sinks = true;
  MT_ASSIGN_OR_RETURN(const int w, read_window(r, 128));
  MT_ASSIGN_OR_RETURN(bool typed, read_layer_types(r, c, w, false));
  if (!typed) {
    c.layers.assign(size_t(c.num_layers), LayerAttention{});
    for (int l = 0; l < c.num_layers; l += 2) c.layers[size_t(l)].window = w;
  }
  MT_RETURN_IF_ERROR(read_moe(r, c, 128, 4, c.intermediate_size));
  // OpenAI's own names, which the hub's config.json carries beside transformers' (not read by
  // transformers): experts_per_token must say what num_experts_per_tok says.
  if (const Json* k = r.get("experts_per_token"); !is_null(k) && !(k->is_integer() && k->as_int() == c.moe.top_k))
    return r.fail("experts_per_token", "is " + k->dump() + " but num_experts_per_tok is " + std::to_string(c.moe.top_k));
  MoeConfig& m = c.moe;
  m.router = RouterKind::kTopKSoftmax;
  m.router_bias = m.expert_bias = true;
  m.names = MoeNames::kGptOss;
  // As transformers 5.24 reads them (its fixtures: tests/fixtures/moe/gpt_oss clamps at 1.25);
  // 5.17's GptOssExperts fixed 1.702 and 7.0, the hub's values.
  double alpha = 1.702, limit = 7.0;
  MT_RETURN_IF_ERROR(r.number("swiglu_alpha", alpha));
  MT_RETURN_IF_ERROR(r.number("swiglu_limit", limit));
  c.activation = Activation(GateActivation::kClampedSwiglu, float(alpha), float(limit));
  return Status::Ok();
}

// Keys only some families read (config_keys.cc lists them as read). Set (not null, false or 0)
// in the config of a family that does not read them, they are refused: transformers would
// ignore them there, and a file that sets them was most likely meant for another family.
constexpr std::string_view kFamilyKeys[] = {
    "sliding_window", "use_sliding_window", "max_window_layers", "hidden_activation", "query_pre_attn_scalar",
    "attn_logit_softcapping", "final_logit_softcapping", "rope_local_base_freq", "sliding_window_pattern",
    "_sliding_window_pattern", "use_bidirectional_attention", "clip_qkv", "resid_pdrop", "embd_pdrop",
    "num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
    "shared_expert_intermediate_size", "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers",
    "output_router_logits", "router_aux_loss_coef", "router_jitter_noise", "qkv_bias", "swiglu_alpha", "swiglu_limit",
    "experts_per_token", "initial_context_length",
};

const std::vector<std::string_view> kQwenKeys = {"sliding_window", "use_sliding_window", "max_window_layers"};
const std::vector<std::string_view> kGemma2Keys = {
    "sliding_window", "hidden_activation", "query_pre_attn_scalar", "attn_logit_softcapping",
    "final_logit_softcapping", "use_bidirectional_attention"};
const std::vector<std::string_view> kGemmaKeys = {
    "sliding_window", "hidden_activation", "query_pre_attn_scalar", "attn_logit_softcapping",
    "final_logit_softcapping", "rope_local_base_freq", "sliding_window_pattern", "_sliding_window_pattern",
    "use_bidirectional_attention"};

const std::vector<std::string_view> kMoeKeys = {"num_experts_per_tok", "output_router_logits", "router_aux_loss_coef",
                                                "num_local_experts", "num_experts"};
std::vector<std::string_view> keys(std::vector<std::string_view> a, const std::vector<std::string_view>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
const std::vector<std::string_view> kQwenMoeKeys = keys(
    kQwenKeys, keys(kMoeKeys, {"moe_intermediate_size", "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers"}));
constexpr const char* kGptOssRope =
    R"({"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": false,
        "original_max_position_embeddings": 4096})";

const Family kFamilies[] = {
    {"LlamaForCausalLM", {}, 1e-6, 0, false, 0, llama},
    {"MistralForCausalLM", {"sliding_window"}, 1e-6, 8, false, 0, mistral},
    {"Qwen2ForCausalLM", kQwenKeys, 1e-6, 32, false, 0, qwen2},
    {"Qwen3ForCausalLM", kQwenKeys, 1e-6, 32, false, 128, qwen3},
    {"Phi3ForCausalLM", {"sliding_window", "resid_pdrop", "embd_pdrop"}, 1e-5, 0, false, 0, phi3},
    {"Olmo2ForCausalLM", {"clip_qkv"}, 1e-5, 0, false, 0, olmo2},
    {"Gemma2ForCausalLM", kGemma2Keys, 1e-6, 4, true, 256, gemma2},
    {"Gemma3ForCausalLM", kGemmaKeys, 1e-6, 4, true, 256, gemma3, 1e6},  // default_theta["global"]
    {"MixtralForCausalLM", keys(kMoeKeys, {"sliding_window", "router_jitter_noise"}), 1e-5, 8,
     false, 0, mixtral, 1e6},
    {"Qwen2MoeForCausalLM", keys(kQwenMoeKeys, {"shared_expert_intermediate_size", "qkv_bias"}), 1e-6, 16, false, 0,
     qwen2_moe},
    {"Qwen3MoeForCausalLM", kQwenMoeKeys, 1e-6, 4, false, 0, qwen3_moe},
    {"GptOssForCausalLM",
     keys(kMoeKeys, {"sliding_window", "swiglu_alpha", "swiglu_limit", "experts_per_token", "initial_context_length"}), 1e-5,
     8, false, 64, gpt_oss, 150000, kGptOssRope},
};

bool is_off(const Json& v) {
  return v.is_null() || (v.is_bool() && !v.as_bool()) || (v.is_number() && v.as_double() == 0);
}

Status refuse_other_families_keys(const ConfigReader& r, const Family& f) {
  for (std::string_view k : kFamilyKeys) {
    const Json* v = r.get(std::string(k).c_str());
    if (!v || is_off(*v) || std::find(f.own_keys.begin(), f.own_keys.end(), k) != f.own_keys.end()) continue;
    return r.fail(std::string(k), "is " + v->dump() + ", an option " + f.architecture +
                                      " does not have in transformers; refused rather than ignored");
  }
  return Status::Ok();
}

const Family* find_family(const std::string& architecture) {
  for (const Family& f : kFamilies)
    if (architecture == f.architecture) return &f;
  return nullptr;
}

}  // namespace

std::vector<std::string> supported_architectures() {
  std::vector<std::string> out;
  for (const Family& f : kFamilies) out.emplace_back(f.architecture);
  return out;
}

Status read_architecture(const ConfigReader& r, ModelConfig& c) {
  const Json* arch = r.get("architectures");
  if (!arch || !arch->is_array() || arch->items().size() != 1 || !arch->items()[0].is_string())
    return r.fail("architectures", "must be a list with one architecture name");
  c.architecture = arch->items()[0].as_string();
  if (find_family(c.architecture)) return Status::Ok();
  std::string names;
  for (const std::string& a : supported_architectures()) names += (names.empty() ? "" : ", ") + a;
  return r.fail("architectures", "names '" + c.architecture + "', which is not supported (supported: " + names + ")");
}

void apply_family_defaults(ModelConfig& c) {
  const Family& f = *find_family(c.architecture);
  c.rms_norm_eps = f.rms_norm_eps;
  c.rope_theta = f.rope_theta;
  c.num_kv_heads = f.kv_heads ? f.kv_heads : c.num_heads;
  c.tie_word_embeddings = f.tied;
  if (f.head_dim) c.head_dim = f.head_dim;
}

Status read_family_variants(const ConfigReader& r, ModelConfig& c) {
  const Family& f = *find_family(c.architecture);
  MT_RETURN_IF_ERROR(refuse_other_families_keys(r, f));
  return f.variants(r, c);
}

bool family_has_local_rope(const std::string& architecture) { return architecture == "Gemma3ForCausalLM"; }

const char* family_default_rope(const std::string& architecture) {
  const Family* f = find_family(architecture);
  return f ? f->default_rope : nullptr;
}

}  // namespace mt

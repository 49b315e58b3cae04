#include "engine/model/param_schema.h"

#include "kernels/bf16.h"

namespace mt {

const char* unit_kind_name(UnitKind kind) {
  switch (kind) {
    case UnitKind::kEmbedding: return "embedding";
    case UnitKind::kDecoder: return "decoder";
    case UnitKind::kHead: return "head";
    case UnitKind::kExpert: return "expert";
  }
  return "?";
}

const TensorSpec* ParamSchema::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

namespace {

void add(ParamSchema& u, std::string name, std::vector<int64_t> shape, bool decay) {
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  u.tensors.push_back({std::move(name), std::move(shape), u.numel, n, decay});
  u.numel += n;
}

// A gated MLP's tensors under prefix p: fused (Phi-3) or gate and up adjacent (one [2F, C]
// matrix either way), then down. Mixtral's experts name them w1 (gate), w3 (up), w2 (down).
void add_gated_mlp(ParamSchema& u, const std::string& p, int64_t C, int64_t F, bool fused, bool mixtral = false) {
  if (fused) {
    add(u, p + "gate_up_proj.weight", {2 * F, C}, true);
  } else {
    add(u, p + (mixtral ? "w1.weight" : "gate_proj.weight"), {F, C}, true);
    add(u, p + (mixtral ? "w3.weight" : "up_proj.weight"), {F, C}, true);
  }
  add(u, p + (mixtral ? "w2.weight" : "down_proj.weight"), {C, F}, true);
}

// Where a family keeps an MoE layer's router and experts: Mixtral's block_sparse_moe, else mlp.
std::string moe_prefix(const ModelConfig& c, int l) {
  return "model.layers." + std::to_string(l) + (c.moe.names == MoeNames::kMixtral ? ".block_sparse_moe." : ".mlp.");
}

// An MoE layer's MLP part of its decoder unit: the router, then the shared expert and its gate.
void add_moe_block(ParamSchema& u, const ModelConfig& c, int l) {
  const std::string p = moe_prefix(c, l);
  const int64_t C = c.hidden_size, E = c.moe.num_experts;
  const std::string router = p + (c.moe.names == MoeNames::kGptOss ? "router." : "gate.");
  add(u, router + "weight", {E, C}, true);
  if (c.moe.router_bias) add(u, router + "bias", {E}, false);
  if (c.moe.shared_ffn == 0) return;
  add_gated_mlp(u, p + "shared_expert.", C, c.moe.shared_ffn, false);
  add(u, p + "shared_expert_gate.weight", {1, C}, true);
}

// A decoder layer's tensors in the order of its flat buffer (bind_decoder walks the same
// order), under the family's own names: the pre-MLP norm is Llama's post_attention_layernorm
// but Gemma's pre_feedforward_layernorm; Gemma's and OLMo 2's post_attention_layernorm is the
// attention output's norm. Phi-3 stores q/k/v and gate/up fused, as our buffer does anyway.
ParamSchema decoder_schema(const ModelConfig& c, int l) {
  ParamSchema u{UnitKind::kDecoder, l, -1, {}, 0};
  const std::string p = "model.layers." + std::to_string(l) + ".";
  const int64_t C = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim();
  if (c.pre_norms()) add(u, p + "input_layernorm.weight", {C}, false);
  if (c.fused_projections) {
    add(u, p + "self_attn.qkv_proj.weight", {Q + 2 * KV, C}, true);
  } else {
    add(u, p + "self_attn.q_proj.weight", {Q, C}, true);  // q, k, v adjacent: one qkv matrix
    add(u, p + "self_attn.k_proj.weight", {KV, C}, true);
    add(u, p + "self_attn.v_proj.weight", {KV, C}, true);
  }
  if (c.attention_bias) {
    add(u, p + "self_attn.q_proj.bias", {Q}, false);
    add(u, p + "self_attn.k_proj.bias", {KV}, false);
    add(u, p + "self_attn.v_proj.bias", {KV}, false);
  }
  if (c.qk_norm != QkNorm::kNone) {
    add(u, p + "self_attn.q_norm.weight", {c.q_norm_width()}, false);
    add(u, p + "self_attn.k_norm.weight", {c.k_norm_width()}, false);
  }
  add(u, p + "self_attn.o_proj.weight", {C, Q}, true);
  if (c.o_bias) add(u, p + "self_attn.o_proj.bias", {C}, false);
  if (c.attention_sinks) add(u, p + "self_attn.sinks", {c.num_heads}, false);
  if (c.post_norms()) add(u, p + "post_attention_layernorm.weight", {C}, false);
  if (c.pre_norms())
    add(u, p + (c.post_norms() ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight"), {C}, false);
  if (c.is_moe_layer(l)) add_moe_block(u, c, l);
  else add_gated_mlp(u, p + "mlp.", C, c.intermediate_size, c.fused_projections);
  if (c.post_norms()) add(u, p + "post_feedforward_layernorm.weight", {C}, false);
  return u;
}

// Expert e of layer l. gpt-oss's Hugging Face files stack a layer's experts in one tensor, its
// gate and up interleaved and transposed ([E, C, 2F]); ours keeps each expert's slice as the
// other families do ([gate; up] rows of [2F, C], down [C, F]) under the names below, and
// hf_io converts the stacked form both ways.
ParamSchema expert_schema(const ModelConfig& c, int l, int e) {
  ParamSchema u{UnitKind::kExpert, l, e, {}, 0};
  const std::string p = moe_prefix(c, l) + "experts." + std::to_string(e) + ".";
  const int64_t C = c.hidden_size, F = c.moe.expert_ffn;
  if (c.moe.names != MoeNames::kGptOss) {
    add_gated_mlp(u, p, C, F, false, c.moe.names == MoeNames::kMixtral);
    return u;
  }
  add(u, p + "gate_up_proj", {2 * F, C}, true);
  if (c.moe.expert_bias) add(u, p + "gate_up_proj_bias", {2 * F}, false);
  add(u, p + "down_proj", {C, F}, true);
  if (c.moe.expert_bias) add(u, p + "down_proj_bias", {C}, false);
  return u;
}

}  // namespace

std::vector<ParamSchema> build_param_schemas(const ModelConfig& c) {
  std::vector<ParamSchema> units;
  ParamSchema emb{UnitKind::kEmbedding, -1, -1, {}, 0};
  add(emb, "model.embed_tokens.weight", {c.vocab_size, c.hidden_size}, true);
  units.push_back(std::move(emb));
  for (int l = 0; l < c.num_layers; ++l) units.push_back(decoder_schema(c, l));
  ParamSchema head{UnitKind::kHead, -1, -1, {}, 0};
  add(head, "model.norm.weight", {c.hidden_size}, false);
  if (!c.tie_word_embeddings) add(head, "lm_head.weight", {c.vocab_size, c.hidden_size}, true);
  units.push_back(std::move(head));
  for (int l = 0; l < c.num_layers; ++l)
    for (int e = 0; c.is_moe_layer(l) && e < c.moe.num_experts; ++e) units.push_back(expert_schema(c, l, e));
  return units;
}

int expert_unit(const ModelConfig& c, int l, int e) {
  int u = c.num_layers + 2;
  for (int i = 0; i < l; ++i) u += c.is_moe_layer(i) ? c.moe.num_experts : 0;
  return u + e;
}

template <typename T>
DecoderView<T> bind_decoder(const ModelConfig& c, int l, T* base) {
  const size_t C = size_t(c.hidden_size), QKV = size_t(c.qkv_dim()), Q = size_t(c.q_dim());
  const size_t F = size_t(c.dense_ffn(l)), E = size_t(c.moe.num_experts);
  const bool moe = c.is_moe_layer(l);
  DecoderView<T> v{};
  T* p = base;
  auto take = [&p](bool present, size_t n) {
    T* at = present ? p : nullptr;
    if (present) p += n;
    return at;
  };
  v.ln1 = take(c.pre_norms(), C);
  v.wqkv = take(true, QKV * C);
  v.bqkv = take(c.attention_bias, QKV);
  v.qn = take(c.qk_norm != QkNorm::kNone, size_t(c.q_norm_width()));
  v.kn = take(c.qk_norm != QkNorm::kNone, size_t(c.k_norm_width()));
  v.wo = take(true, C * Q);
  v.bo = take(c.o_bias, C);
  v.sinks = take(c.attention_sinks, size_t(c.num_heads));
  v.ln_attn_out = take(c.post_norms(), C);
  v.ln2 = take(c.pre_norms(), C);
  v.router = take(moe, E * C);
  v.router_b = take(moe && c.moe.router_bias, E);
  v.wgu = take(F > 0, 2 * F * C);
  v.wdown = take(F > 0, C * F);
  v.shared_gate = take(moe && F > 0, C);
  v.ln_mlp_out = take(c.post_norms(), C);
  return v;
}

template <typename T>
ExpertView<T> bind_expert(const ModelConfig& c, T* base) {
  const size_t C = size_t(c.hidden_size), F = size_t(c.moe.expert_ffn);
  const bool b = c.moe.expert_bias;
  return {base, b ? base + 2 * F * C : nullptr, base + 2 * F * C + (b ? 2 * F : 0),
          b ? base + 2 * F * C + 2 * F + C * F : nullptr};
}

template <typename T>
HeadView<T> bind_head(const ModelConfig& c, T* base) {
  return {base, c.tie_word_embeddings ? nullptr : base + c.hidden_size};
}

#define MT_INSTANTIATE(T)                                                 \
  template DecoderView<T> bind_decoder(const ModelConfig&, int, T*);      \
  template ExpertView<T> bind_expert(const ModelConfig&, T*);             \
  template HeadView<T> bind_head(const ModelConfig&, T*);
MT_INSTANTIATE(float)
MT_INSTANTIATE(const float)
MT_INSTANTIATE(double)
MT_INSTANTIATE(const double)
MT_INSTANTIATE(const bf16)
#undef MT_INSTANTIATE

}  // namespace mt

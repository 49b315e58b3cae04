#include "engine/model/param_schema.h"

#include "kernels/bf16.h"

namespace mt {

const char* unit_kind_name(UnitKind kind) {
  switch (kind) {
    case UnitKind::kEmbedding: return "embedding";
    case UnitKind::kDecoder: return "decoder";
    case UnitKind::kHead: return "head";
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

// A decoder layer's tensors in the order of its flat buffer (bind_decoder walks the same
// order), under the family's own names: the pre-MLP norm is Llama's post_attention_layernorm
// but Gemma's pre_feedforward_layernorm; Gemma's and OLMo 2's post_attention_layernorm is the
// attention output's norm. Phi-3 stores q/k/v and gate/up fused, as our buffer does anyway.
ParamSchema decoder_schema(const ModelConfig& c, int l) {
  ParamSchema u{UnitKind::kDecoder, l, {}, 0};
  const std::string p = "model.layers." + std::to_string(l) + ".";
  const int64_t C = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim(), F = c.intermediate_size;
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
  if (c.post_norms()) add(u, p + "post_attention_layernorm.weight", {C}, false);
  if (c.pre_norms())
    add(u, p + (c.post_norms() ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight"), {C}, false);
  if (c.fused_projections) {
    add(u, p + "mlp.gate_up_proj.weight", {2 * F, C}, true);
  } else {
    add(u, p + "mlp.gate_proj.weight", {F, C}, true);  // gate, up adjacent: one [2F, C] matrix
    add(u, p + "mlp.up_proj.weight", {F, C}, true);
  }
  add(u, p + "mlp.down_proj.weight", {C, F}, true);
  if (c.post_norms()) add(u, p + "post_feedforward_layernorm.weight", {C}, false);
  return u;
}

}  // namespace

std::vector<ParamSchema> build_param_schemas(const ModelConfig& c) {
  std::vector<ParamSchema> units;
  ParamSchema emb{UnitKind::kEmbedding, -1, {}, 0};
  add(emb, "model.embed_tokens.weight", {c.vocab_size, c.hidden_size}, true);
  units.push_back(std::move(emb));
  for (int l = 0; l < c.num_layers; ++l) units.push_back(decoder_schema(c, l));
  ParamSchema head{UnitKind::kHead, -1, {}, 0};
  add(head, "model.norm.weight", {c.hidden_size}, false);
  if (!c.tie_word_embeddings) add(head, "lm_head.weight", {c.vocab_size, c.hidden_size}, true);
  units.push_back(std::move(head));
  return units;
}

template <typename T>
DecoderView<T> bind_decoder(const ModelConfig& c, T* base) {
  const size_t C = size_t(c.hidden_size), QKV = size_t(c.qkv_dim()), Q = size_t(c.q_dim());
  const size_t F = size_t(c.intermediate_size);
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
  v.ln_attn_out = take(c.post_norms(), C);
  v.ln2 = take(c.pre_norms(), C);
  v.wgu = take(true, 2 * F * C);
  v.wdown = take(true, C * F);
  v.ln_mlp_out = take(c.post_norms(), C);
  return v;
}

template <typename T>
HeadView<T> bind_head(const ModelConfig& c, T* base) {
  return {base, c.tie_word_embeddings ? nullptr : base + c.hidden_size};
}

template DecoderView<float> bind_decoder(const ModelConfig&, float*);
template DecoderView<const float> bind_decoder(const ModelConfig&, const float*);
template DecoderView<double> bind_decoder(const ModelConfig&, double*);
template DecoderView<const double> bind_decoder(const ModelConfig&, const double*);
template HeadView<float> bind_head(const ModelConfig&, float*);
template HeadView<const float> bind_head(const ModelConfig&, const float*);
template HeadView<double> bind_head(const ModelConfig&, double*);
template HeadView<const double> bind_head(const ModelConfig&, const double*);
template DecoderView<const bf16> bind_decoder(const ModelConfig&, const bf16*);
template HeadView<const bf16> bind_head(const ModelConfig&, const bf16*);

}  // namespace mt

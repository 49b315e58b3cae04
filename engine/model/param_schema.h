// ParamSchema: the tensors of one streamed unit (embedding, one decoder layer, or final norm +
// LM head) — their Hugging Face names, shapes and offsets in the unit's flat buffer — and the
// pointer arithmetic that binds a unit's weights wherever they currently sit (host store,
// device slot). Binding is stateless: nothing is kept per layer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/model_config.h"

namespace mt {

enum class UnitKind { kEmbedding, kDecoder, kHead, kExpert };
const char* unit_kind_name(UnitKind kind);

struct TensorSpec {
  std::string name;            // HF name, e.g. "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // HF shape, row-major
  size_t offset = 0;           // in elements from the start of the unit
  size_t numel = 0;
  bool decay = false;          // weight decay applies (matrices and embeddings, not norms/biases)
};

struct ParamSchema {
  UnitKind kind = UnitKind::kDecoder;
  int layer = -1;   // decoder layer index (of a decoder or an expert), -1 otherwise
  int expert = -1;  // an expert's index in its layer, -1 otherwise
  std::vector<TensorSpec> tensors;
  size_t numel = 0;
  const TensorSpec* find(const std::string& name) const;
};

// Units in streaming order: embedding, decoder 0..L-1, head; then, for a mixture of experts,
// every expert of every MoE layer (layer by layer, expert_unit()), each a unit of its own so a
// step uploads and updates only those that received tokens. A MoE layer's decoder unit holds
// its attention, norms, router and shared expert. With tied embeddings the head unit holds only
// the final norm; the LM head then reads the embedding unit's weights.
std::vector<ParamSchema> build_param_schemas(const ModelConfig& cfg);
// The unit index of expert e of layer l (an MoE layer).
int expert_unit(const ModelConfig& cfg, int l, int e);

// Views of a unit's weights (or gradients: same layout) at `base`. q, k and v projections
// are adjacent, so they are one [qkv_dim, C] matrix; gate and up likewise one [2F, C]. A
// tensor the family does not have is nullptr (ModelConfig's variants say which).
template <typename T>
struct DecoderView {
  T* ln1;          // [C] the attention branch's input norm (pre-norms)
  T* wqkv;         // [q_dim + 2 kv_dim, C]
  T* bqkv;         // [q_dim + 2 kv_dim] (attention_bias)
  T* qn;           // [q_norm_width] (qk_norm)
  T* kn;           // [k_norm_width] (qk_norm)
  T* wo;           // [C, q_dim]
  T* bo;           // [C] (o_bias)
  T* sinks;        // [H] (attention_sinks)
  T* ln_attn_out;  // [C] the attention branch's output norm (post-norms)
  T* ln2;          // [C] the MLP branch's input norm (pre-norms)
  T* router;       // [E, C] (an MoE layer)
  T* router_b;     // [E] (moe.router_bias)
  T* wgu;          // [2F, C] the dense MLP (an MoE layer: the shared expert, F = shared_ffn; or none)
  T* wdown;        // [C, F]
  T* shared_gate;  // [1, C] the shared expert's gate (an MoE layer with a shared expert)
  T* ln_mlp_out;   // [C] the MLP branch's output norm (post-norms)
};

// Layer l's tensors at base (the layer says whether its MLP is dense or a mixture of experts).
template <typename T>
DecoderView<T> bind_decoder(const ModelConfig& cfg, int l, T* base);

// One expert's gated MLP (F = moe.expert_ffn); its biases with moe.expert_bias (gpt-oss).
template <typename T>
struct ExpertView {
  T* wgu;    // [2F, C] gate rows, then up rows
  T* bgu;    // [2F]
  T* wdown;  // [C, F]
  T* bdown;  // [C]
};

template <typename T>
ExpertView<T> bind_expert(const ModelConfig& cfg, T* base);

template <typename T>
struct HeadView {
  T* norm;  // [C]
  T* lm;    // [V, C], nullptr when tied (use the embedding unit)
};

template <typename T>
HeadView<T> bind_head(const ModelConfig& cfg, T* base);

}  // namespace mt

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

enum class UnitKind { kEmbedding, kDecoder, kHead };
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
  int layer = -1;  // decoder layer index, -1 otherwise
  std::vector<TensorSpec> tensors;
  size_t numel = 0;
  const TensorSpec* find(const std::string& name) const;
};

// Units in streaming order: embedding, decoder 0..L-1, head. With tied embeddings the head
// unit holds only the final norm; the LM head then reads the embedding unit's weights.
std::vector<ParamSchema> build_param_schemas(const ModelConfig& cfg);

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
  T* ln_attn_out;  // [C] the attention branch's output norm (post-norms)
  T* ln2;          // [C] the MLP branch's input norm (pre-norms)
  T* wgu;          // [2F, C]
  T* wdown;        // [C, F]
  T* ln_mlp_out;   // [C] the MLP branch's output norm (post-norms)
};

template <typename T>
DecoderView<T> bind_decoder(const ModelConfig& cfg, T* base);

template <typename T>
struct HeadView {
  T* norm;  // [C]
  T* lm;    // [V, C], nullptr when tied (use the embedding unit)
};

template <typename T>
HeadView<T> bind_head(const ModelConfig& cfg, T* base);

}  // namespace mt

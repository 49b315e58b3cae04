#include "engine/model/config_keys.h"

#include <algorithm>
#include <string_view>

namespace mt {

namespace {

// Read by parse_model_config (model_config.cc), which refuses the values it does not implement.
constexpr std::string_view kReadKeys[] = {
    "architectures", "model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "intermediate_size", "vocab_size", "head_dim", "max_position_embeddings",
    "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters", "initializer_range",
    "tie_word_embeddings", "hidden_act", "sliding_window", "use_sliding_window", "max_window_layers",
    "layer_types", "mlp_bias", "attention_bias", "partial_rotary_factor", "pretraining_tp",
    "attention_dropout", "use_mrope", "pad_token_id",
    // replaces a flat llama3 / yarn RoPE object's own (model_config.cc, top_level_original)
    "original_max_position_embeddings",
    // families.cc: each family's variants
    "hidden_activation", "query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
    "rope_local_base_freq", "sliding_window_pattern", "_sliding_window_pattern", "use_bidirectional_attention", "clip_qkv", "resid_pdrop",
    "embd_pdrop",
    // families.cc: mixtures of experts
    "num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
    "shared_expert_intermediate_size", "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers",
    "output_router_logits", "router_aux_loss_coef", "router_jitter_noise", "qkv_bias", "swiglu_alpha", "swiglu_limit",
    // gpt-oss's hub config carries OpenAI's names too: experts_per_token (checked against
    // num_experts_per_tok), initial_context_length (rope_scaling's original_max_position_embeddings)
    "experts_per_token", "initial_context_length",
    // model_config.cc: refused unless it names gpt-oss's MXFP4 experts (dequantized on load)
    "quantization_config",
};

// Harmless for training this model, by group:
constexpr std::string_view kHarmlessKeys[] = {
    // Provenance and storage: who wrote the file, in which dtype the weights were saved (we read
    // the dtype from the safetensors headers themselves; transformers 4 wrote torch_dtype, 5 dtype).
    "_name_or_path", "_commit_hash", "transformers_version", "torch_dtype", "dtype",
    // transformers' runtime switches: the attention kernel, the KV cache, output structure,
    // TorchScript (at false: checked below), the tensor/pipeline-parallel plans. None changes the
    // loss or its gradient.
    "_attn_implementation", "_attn_implementation_autoset", "_experts_implementation", "use_cache", "return_dict",
    "output_attentions", "output_hidden_states", "torchscript", "use_bfloat16", "tf_legacy_loss",
    "base_model_tp_plan", "base_model_pp_plan", "gradient_checkpointing", "chunk_size_feed_forward",
    "is_decoder", "cross_attention_hidden_size",
    // The KV cache's kind for generation (Gemma 3's "hybrid"): generation only.
    "cache_implementation",
    // Special token ids (the data pipeline's business, data.eod_id) and the tokenizer's class.
    "bos_token_id", "eos_token_id", "sep_token_id", "decoder_start_token_id",
    "tokenizer_class",
    // Generation defaults, written into config.json by transformers 4 before generation_config.json.
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
    "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
    "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
    "suppress_tokens", "begin_suppress_tokens",
    // Heads for other tasks (sequence classification labels): a causal LM does not build them.
    "id2label", "label2id", "num_labels", "problem_type", "finetuning_task", "prefix",
    "task_specific_params",
    // Encoder-decoder switches, harmless at their decoder-only values (checked below).
    "is_encoder_decoder", "add_cross_attention", "tie_encoder_decoder", "pruned_heads",
};

// Keys refused with a reason of their own (anything else unknown gets the generic one).
struct Refused {
  std::string_view key, why;
};
constexpr Refused kRefusedKeys[] = {
    {"auto_map", "names custom modeling code (trust_remote_code), which MegaTrain does not run"},
};

template <size_t N>
bool listed(const std::string_view (&keys)[N], std::string_view k) {
  return std::find(std::begin(keys), std::end(keys), k) != std::end(keys);
}

// A harmless key whose value must be the decoder-only default to stay harmless; "" when it is.
std::string bad_value(const std::string& k, const Json& v) {
  const bool is_false = v.is_null() || (v.is_bool() && !v.as_bool());
  if ((k == "is_encoder_decoder" || k == "add_cross_attention" || k == "tie_encoder_decoder") && !is_false)
    return "must be false for a decoder-only causal LM";
  if (k == "torchscript" && !is_false)  // transformers 4 then clones a tied head instead of tying it
    return "must be false: transformers 4 unties the embedding and the LM head under it";
  if (k == "pruned_heads" && !(v.is_null() || (v.is_object() && v.members().empty())))
    return "names pruned attention heads, which are not supported";
  return "";
}

}  // namespace

bool is_read_config_key(std::string_view key) { return listed(kReadKeys, key); }

Status check_config_keys(const Json& config, const std::string& source) {
  if (!config.is_object()) return Status::Ok();
  auto fail = [&](const std::string& k, const std::string& why) {
    return invalid_argument(source + ": field '" + k + "' " + why);
  };
  for (const auto& [k, v] : config.members()) {
    if (listed(kReadKeys, k)) continue;
    if (listed(kHarmlessKeys, k)) {
      if (const std::string why = bad_value(k, v); !why.empty()) return fail(k, why);
      continue;
    }
    for (const Refused& r : kRefusedKeys)
      if (r.key == k) return fail(k, std::string(r.why));
    return fail(k, "is not a key MegaTrain reads or knows to be harmless, so it is refused rather than "
                   "ignored (engine/model/config_keys.cc lists both; remove it if it does not change the model)");
  }
  return Status::Ok();
}

}  // namespace mt

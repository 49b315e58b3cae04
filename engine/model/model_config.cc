#include "engine/model/model_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <numbers>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/model/config_keys.h"
#include "engine/model/config_reader.h"
#include "engine/model/families.h"
#include "engine/model/param_schema.h"

namespace mt {

extern const std::pair<std::string_view, std::string_view> kPresetFiles[];
extern const int kPresetCount;

namespace {

// YaRN as transformers computes it (modeling_rope_utils.py, _compute_yarn_parameters).
double yarn_mscale(double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; }

double yarn_attention_factor(const RopeScaling& s) {
  if (s.attention_factor > 0) return s.attention_factor;
  if (s.mscale > 0 && s.mscale_all_dim > 0)
    return yarn_mscale(s.factor, s.mscale) / yarn_mscale(s.factor, s.mscale_all_dim);
  return yarn_mscale(s.factor, 1.0);
}

// The dimension pair index where `rotations` full turns fit in the original context.
double yarn_correction_dim(double rotations, int dim, double base, double max_pos) {
  return dim * std::log(max_pos / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
}

// Pairs below `low` extrapolate, above `high` interpolate, linear in between.
struct YarnRamp {
  double low = 0, high = 1;
};
YarnRamp yarn_ramp(const RopeScaling& s, int dim, double base) {
  if (s.type != "yarn") return {};
  const double orig = double(s.original_max_position_embeddings);
  double low = yarn_correction_dim(s.beta_fast, dim, base, orig);
  double high = yarn_correction_dim(s.beta_slow, dim, base, orig);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  YarnRamp r{std::max(low, 0.0), std::min(high, double(dim - 1))};
  if (r.low == r.high) r.high += 0.001;  // as transformers: prevent a zero-width ramp
  return r;
}

// The keys a RoPE object may hold for its type: read, never ignored (rope_theta only inside
// transformers 5's rope_parameters, with partial_rotary_factor, which 5 moves there and which must
// be 1). original_max_position_embeddings is accepted for every type: transformers reads it only
// for llama3 and yarn, and so do we.
bool rope_key_known(const std::string& type, const std::string& k, bool in_parameters) {
  if (k == "rope_type" || k == "type" || k == "original_max_position_embeddings") return true;
  if (in_parameters && (k == "rope_theta" || k == "partial_rotary_factor")) return true;
  if (type == "linear") return k == "factor";
  if (type == "llama3") return k == "factor" || k == "low_freq_factor" || k == "high_freq_factor";
  if (type == "yarn")
    return k == "factor" || k == "beta_fast" || k == "beta_slow" || k == "mscale" || k == "mscale_all_dim" ||
           k == "attention_factor" || k == "truncate";
  return false;
}

// The keys transformers requires of a RoPE object of `type` (no defaults are taken for them).
std::vector<const char*> required_rope_keys(const std::string& type) {
  if (type == "linear" || type == "yarn") return {"factor"};
  if (type == "llama3") return {"factor", "low_freq_factor", "high_freq_factor"};
  return {};
}

// One RoPE object `rs` named `name`: transformers 4's rope_scaling or 5's rope_parameters.
Status read_rope_object(const ConfigReader& r, const Json& rs, const std::string& name, ModelConfig& c) {
  if (!rs.is_object()) return r.fail(name, "must be an object or null");
  const Json* type = rs.find("rope_type");
  if (!type) type = rs.find("type");
  if (!type || !type->is_string()) return r.fail(name + ".rope_type", "is missing");
  RopeScaling& s = c.rope_scaling;
  s.type = type->as_string();
  if (s.type != "default" && s.type != "linear" && s.type != "llama3" && s.type != "yarn")
    return r.fail(name + ".rope_type",
                  "'" + s.type + "' is not supported (supported: default, linear, llama3, yarn)");
  for (const char* k : required_rope_keys(s.type))  // transformers' rope_config_validation: a KeyError
    if (!rs.find(k)) return r.fail(name + "." + k, "is required for rope_type '" + s.type + "'");
  const bool in_parameters = name.rfind("rope_parameters", 0) == 0;
  for (const auto& [k, v] : rs.members())
    if (!rope_key_known(s.type, k, in_parameters))
      return r.fail(name + "." + k, "is not read for rope_type '" + s.type + "'; refused rather than ignored");
  auto num = [&](const char* k, double& out) -> Status {
    const Json* v = rs.find(k);
    if (!v) return Status::Ok();
    if (!v->is_number() || !(v->as_double() > 0))
      return r.fail(name + "." + k, "must be a positive number, got " + v->dump());
    out = v->as_double();
    return Status::Ok();
  };
  MT_RETURN_IF_ERROR(num("rope_theta", c.rope_theta));
  if (const Json* prf = rs.find("partial_rotary_factor"); prf && !(prf->is_number() && prf->as_double() == 1.0))
    return r.fail(name + ".partial_rotary_factor", "must be 1 (partial rotary embeddings are not supported)");
  MT_RETURN_IF_ERROR(num("factor", s.factor));
  MT_RETURN_IF_ERROR(num("low_freq_factor", s.low_freq_factor));
  MT_RETURN_IF_ERROR(num("high_freq_factor", s.high_freq_factor));
  // transformers 5's standardize_rope_params: llama3 and yarn without it take max_position_embeddings
  // (a top-level original_max_position_embeddings replaces both: top_level_original).
  const bool scaled = s.type == "yarn" || s.type == "llama3";
  if (s.type == "llama3" && !rs.find("original_max_position_embeddings") && c.max_position_embeddings <= 0 &&
      !r.get("original_max_position_embeddings"))
    return r.fail(name + ".original_max_position_embeddings", "is required for rope_type 'llama3' without max_position_embeddings");
  double orig = double(scaled && c.max_position_embeddings > 0 ? c.max_position_embeddings
                                                                : s.original_max_position_embeddings);
  MT_RETURN_IF_ERROR(num("original_max_position_embeddings", orig));
  if (orig > double(ModelLimits::kMaxPositions))
    return r.fail(name + ".original_max_position_embeddings", "exceeds " + std::to_string(ModelLimits::kMaxPositions));
  s.original_max_position_embeddings = int64_t(orig);
  if (s.type == "llama3" && !(s.high_freq_factor > s.low_freq_factor))
    return r.fail(name + ".high_freq_factor", "must exceed low_freq_factor");
  if (s.type != "yarn") return Status::Ok();
  for (auto [k, out] : {std::pair{"beta_fast", &s.beta_fast}, {"beta_slow", &s.beta_slow}, {"mscale", &s.mscale},
                        {"mscale_all_dim", &s.mscale_all_dim}, {"attention_factor", &s.attention_factor}})
    MT_RETURN_IF_ERROR(num(k, *out));
  if (const Json* t = rs.find("truncate")) {
    if (!t->is_bool()) return r.fail(name + ".truncate", "must be true or false, got " + t->dump());
    s.truncate = t->as_bool();
  }
  c.rope_attention_factor = yarn_attention_factor(s);
  return Status::Ok();
}

// transformers 5's RoPE per layer type (Gemma 3): full_attention's object is the global table,
// sliding_attention's (default RoPE only) the local one. The top-level keys must not also be set.
Status read_rope_per_layer_type(const ConfigReader& r, const Json& params, ModelConfig& c) {
  for (const char* k : {"rope_theta", "rope_scaling", "rope_local_base_freq"})
    if (const Json* v = r.get(k); v && !v->is_null())
      return r.fail(k, "is set beside rope_parameters per layer type; which one is meant is unknown");
  for (const auto& [k, v] : params.members()) {
    const std::string name = "rope_parameters." + k;
    if (k == "full_attention") {
      MT_RETURN_IF_ERROR(read_rope_object(r, v, name, c));
    } else if (k == "sliding_attention") {
      ModelConfig local = c;
      local.rope_theta = ModelConfig::kDefaultLocalTheta;  // when the object has none
      MT_RETURN_IF_ERROR(read_rope_object(r, v, name, local));
      if (local.rope_scaling.type != "default") return r.fail(name + ".rope_type", "must be default for the local layers");
      c.rope_local_theta = local.rope_theta;
    } else {
      return r.fail(name, "names no layer type (full_attention, sliding_attention)");
    }
  }
  return Status::Ok();
}

// A top-level original_max_position_embeddings replaces a flat llama3 or yarn object's own, as
// transformers 5's standardize_rope_params does (it keeps Phi-3's top-level copy "in priority").
Status top_level_original(const ConfigReader& r, ModelConfig& c) {
  RopeScaling& s = c.rope_scaling;
  if (s.type != "llama3" && s.type != "yarn") return Status::Ok();
  const Json* v = r.get("original_max_position_embeddings");
  if (!v || v->is_null()) return Status::Ok();
  int orig = 0;
  MT_RETURN_IF_ERROR(r.positive_int("original_max_position_embeddings", orig, ModelLimits::kMaxPositions, false));
  s.original_max_position_embeddings = orig;
  if (s.type == "yarn") c.rope_attention_factor = yarn_attention_factor(s);
  return Status::Ok();
}

// RoPE as transformers 4 writes it (top-level rope_theta and rope_scaling) and as transformers 5
// does (rope_parameters only, flat). Both forms present must say the same, else refused naming
// them. The per-layer-type form of rope_parameters ({"full_attention": {...}}) is refused:
// transformers 5 recognises it only for families with layer types (Gemma 3), not these.
Status read_rope(const ConfigReader& r, ModelConfig& c) {
  ModelConfig legacy = c;
  MT_RETURN_IF_ERROR(r.number("rope_theta", legacy.rope_theta));
  const Json* scaling = r.get("rope_scaling");
  if (scaling && !scaling->is_null()) MT_RETURN_IF_ERROR(read_rope_object(r, *scaling, "rope_scaling", legacy));
  const Json* params = r.get("rope_parameters");
  if ((!params || params->is_null()) && (!scaling || scaling->is_null()))
    if (const char* d = family_default_rope(c.architecture)) {  // as transformers fills it in
      MT_ASSIGN_OR_RETURN(const Json fallback, Json::parse(d));
      MT_RETURN_IF_ERROR(read_rope_object(r, fallback, "rope_parameters (" + c.architecture + "'s default)", legacy));
    }
  if (!params || params->is_null()) {
    c = std::move(legacy);
    return top_level_original(r, c);
  }
  if (params->is_object())
    for (const auto& [k, v] : params->members())
      if (v.is_object()) {
        if (family_has_local_rope(c.architecture)) return read_rope_per_layer_type(r, *params, c);
        return r.fail("rope_parameters." + k, "is RoPE per layer type, which transformers does not read for " +
                                                  c.architecture + " (it would use theta 10000); use the flat form");
      }
  if (family_has_local_rope(c.architecture))  // transformers 5 adds the per-type objects beside it, unread
    return r.fail("rope_parameters", "is flat (" + params->dump() + "), which transformers 5 does not read for " +
                                         c.architecture + ": give it per layer type ({\"full_attention\": {...}, "
                                         "\"sliding_attention\": {...}}), or use rope_scaling and rope_theta");
  ModelConfig v5 = c;
  MT_RETURN_IF_ERROR(read_rope_object(r, *params, "rope_parameters", v5));
  const bool has_legacy = r.get("rope_theta") || (scaling && !scaling->is_null());
  if (has_legacy && !(legacy.rope_theta == v5.rope_theta && legacy.rope_scaling == v5.rope_scaling))
    return r.fail("rope_parameters", "(" + params->dump() + ") and the top-level rope_theta / rope_scaling (" +
                            (r.get("rope_theta") ? r.get("rope_theta")->dump() : "absent") + " / " +
                            (scaling ? scaling->dump() : "absent") + ") disagree; which one is meant is unknown");
  c = std::move(v5);
  return top_level_original(r, c);
}

// quantization_config: only gpt-oss's MXFP4 experts, which load dequantized (full precision).
Status read_quantization(const ConfigReader& r, ModelConfig& c) {
  const Json* q = r.get("quantization_config");
  if (!q || q->is_null()) return Status::Ok();
  const Json* method = q->is_object() ? q->find("quant_method") : nullptr;
  if (c.moe.names == MoeNames::kGptOss && c.has_experts() && method && method->is_string() &&
      method->as_string() == "mxfp4") {
    for (const auto& [k, v] : q->members())
      if (k != "quant_method" && k != "modules_to_not_convert")
        return r.fail("quantization_config." + k, "is not read for mxfp4; refused rather than ignored");
    c.moe.mxfp4 = true;
    return Status::Ok();
  }
  return r.fail("quantization_config", "names quantized weights (" + q->dump() +
                                           "); MegaTrain trains full-precision weights (only gpt-oss's MXFP4 "
                                           "experts are dequantized on load)");
}

// Options of every family that change the math and that we do not implement: refused, never
// ignored. Each family's own options are read (or refused) by families.cc.
Status refuse_unsupported(const ConfigReader& r) {
  const Json* mlp_bias = r.get("mlp_bias");  // transformers builds biases for any truthy value
  if (mlp_bias && !mlp_bias->is_null() && !(mlp_bias->is_bool() && !mlp_bias->as_bool()))
    return r.fail("mlp_bias", "is " + mlp_bias->dump() + "; MLP biases are not supported (only false or null)");
  const Json* prf = r.get("partial_rotary_factor");
  if (prf && !(prf->is_number() && prf->as_double() == 1.0))
    return r.fail("partial_rotary_factor", "must be 1 (partial rotary embeddings are not supported)");
  const Json* pt = r.get("pretraining_tp");
  if (pt && !(pt->is_integer() && pt->as_int() == 1))
    return r.fail("pretraining_tp", "must be 1");
  const Json* dropout = r.get("attention_dropout");
  if (dropout && !dropout->is_null() && !(dropout->is_number() && dropout->as_double() == 0))
    return r.fail("attention_dropout", "is " + dropout->dump() + "; attention dropout is not implemented (only 0)");
  const Json* mrope = r.get("use_mrope");
  if (mrope && !mrope->is_null() && !(mrope->is_bool() && !mrope->as_bool()))
    return r.fail("use_mrope", "enables multimodal RoPE, which is not supported");
  return Status::Ok();
}

// transformers' Auto classes build the class of config.json's model_type, not of its
// architectures: a model_type of another family (qwen2 beside LlamaForCausalLM) loads there as
// that family, with its biases, while we would train the architecture named.
Status check_model_type(const ConfigReader& r, const ModelConfig& c) {
  static const std::map<std::string, std::vector<std::string>> kModelTypes = {
      {"LlamaForCausalLM", {"llama"}},           {"MistralForCausalLM", {"mistral"}},
      {"Qwen2ForCausalLM", {"qwen2"}},           {"Qwen3ForCausalLM", {"qwen3"}},
      {"Phi3ForCausalLM", {"phi3"}},             {"Olmo2ForCausalLM", {"olmo2"}},
      {"Gemma2ForCausalLM", {"gemma2"}},         {"Gemma3ForCausalLM", {"gemma3_text", "gemma3"}},
      {"MixtralForCausalLM", {"mixtral"}},       {"Qwen2MoeForCausalLM", {"qwen2_moe"}},
      {"Qwen3MoeForCausalLM", {"qwen3_moe"}},    {"GptOssForCausalLM", {"gpt_oss"}}};
  const Json* type = r.get("model_type");
  const auto it = kModelTypes.find(c.architecture);
  if (!type || type->is_null() || it == kModelTypes.end()) return Status::Ok();
  if (type->is_string() && std::count(it->second.begin(), it->second.end(), type->as_string())) return Status::Ok();
  return r.fail("model_type", "is " + type->dump() + ", another family than architectures' " + c.architecture +
                                  " (expected \"" + it->second.front() + "\"); transformers would build that family");
}

Status check_shape(const ConfigReader& r, const ModelConfig& c) {
  if (c.has_experts() && c.norm_placement != NormPlacement::kPre)
    return r.fail("architectures", "combines post-norms with a mixture of experts, which is not supported");
  if (c.num_heads % c.num_kv_heads != 0)
    return r.fail("num_key_value_heads", "(" + std::to_string(c.num_kv_heads) +
                                             ") must divide num_attention_heads (" + std::to_string(c.num_heads) + ")");
  if (c.head_dim > ModelLimits::kHeadDim)
    return r.fail("head_dim", "= " + std::to_string(c.head_dim) + " (hidden_size / num_attention_heads) exceeds the limit of " +
                                  std::to_string(ModelLimits::kHeadDim));
  if (c.head_dim % 2 != 0) return r.fail("head_dim", "must be even for rotary embeddings, got " + std::to_string(c.head_dim));
  return Status::Ok();
}

}  // namespace

Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source) {
  auto parsed = Json::parse(json_text);
  if (!parsed.ok()) return parsed.status().with_context(source);
  const Json& j = parsed.value();
  if (!j.is_object()) return invalid_argument(source + ": config must be a JSON object");
  ConfigReader r(j, source);
  ModelConfig c;
  c.raw = j;
  MT_RETURN_IF_ERROR(read_architecture(r, c));
  MT_RETURN_IF_ERROR(check_config_keys(j, source));
  if (const Json* mt = j.find("model_type"); mt && mt->is_string()) c.model_type = mt->as_string();
  MT_RETURN_IF_ERROR(check_model_type(r, c));
  MT_RETURN_IF_ERROR(r.positive_int("hidden_size", c.hidden_size, ModelLimits::kHiddenSize));
  MT_RETURN_IF_ERROR(r.positive_int("num_hidden_layers", c.num_layers, ModelLimits::kLayers));
  MT_RETURN_IF_ERROR(r.positive_int("num_attention_heads", c.num_heads, ModelLimits::kHeads));
  apply_family_defaults(c);
  MT_RETURN_IF_ERROR(r.positive_int("num_key_value_heads", c.num_kv_heads, ModelLimits::kHeads, false));
  MT_RETURN_IF_ERROR(r.positive_int("intermediate_size", c.intermediate_size, ModelLimits::kIntermediateSize));
  MT_RETURN_IF_ERROR(r.positive_int("vocab_size", c.vocab_size, ModelLimits::kVocabSize));
  const bool head_dim_given = j.find("head_dim") && !j.find("head_dim")->is_null();
  if (c.head_dim == 0 && c.hidden_size % c.num_heads != 0 && !head_dim_given)
    return r.fail("hidden_size", "must be divisible by num_attention_heads when head_dim is absent");
  if (c.head_dim == 0) c.head_dim = c.hidden_size / c.num_heads;
  MT_RETURN_IF_ERROR(r.positive_int("head_dim", c.head_dim, ModelLimits::kHeadDim, false));
  int max_pos = 0;
  MT_RETURN_IF_ERROR(r.positive_int("max_position_embeddings", max_pos, ModelLimits::kMaxPositions, false));
  c.max_position_embeddings = max_pos;
  MT_RETURN_IF_ERROR(r.number("rms_norm_eps", c.rms_norm_eps));
  MT_RETURN_IF_ERROR(r.number("initializer_range", c.initializer_range));
  MT_RETURN_IF_ERROR(r.boolean("tie_word_embeddings", c.tie_word_embeddings));
  MT_RETURN_IF_ERROR(read_rope(r, c));
  if (const Json* pad = j.find("pad_token_id"); pad && pad->is_integer()) c.pad_token_id = pad->as_int();
  MT_RETURN_IF_ERROR(refuse_unsupported(r));
  MT_RETURN_IF_ERROR(read_family_variants(r, c));
  MT_RETURN_IF_ERROR(read_quantization(r, c));
  MT_RETURN_IF_ERROR(check_shape(r, c));
  return c;
}

Result<ModelConfig> load_model_config(const std::string& path) {
  constexpr uint64_t kMaxConfigBytes = 16 << 20;  // a config.json is a few KiB
  std::error_code ec;
  const std::string file = std::filesystem::is_directory(path, ec) ? path + "/config.json" : path;
  auto text = read_file(file, kMaxConfigBytes);
  if (!text.ok() && text.status().code() == StatusCode::kNotFound) return not_found("no config.json at '" + path + "'");
  if (!text.ok()) return text.status();
  return parse_model_config(text.value(), file);
}

Result<ModelConfig> preset_config(const std::string& name) {
  for (int i = 0; i < kPresetCount; ++i)
    if (kPresetFiles[i].first == name)
      return parse_model_config(std::string(kPresetFiles[i].second), "preset '" + name + "'");
  std::string names;
  for (const auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
  return not_found("unknown model preset '" + name + "' (available: " + names + ")");
}

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  for (int i = 0; i < kPresetCount; ++i) out.emplace_back(kPresetFiles[i].first);
  return out;
}

Json model_config_to_json(const ModelConfig& cfg) {
  Json j = Json::object(cfg.raw.is_object() ? cfg.raw.members() : Json::Object{});  // a copy: raw stays as read
  j.set("architectures", Json::array({Json(cfg.architecture)}));
  j.set("hidden_size", cfg.hidden_size);
  j.set("num_hidden_layers", cfg.num_layers);
  if (j.find("layer_types") && !j.find("layer_types")->is_null()) {  // as deep as the model
    Json types = Json::array({});
    for (int l = 0; l < cfg.num_layers; ++l)
      types.items().push_back(Json(cfg.layer_attention(l).window > 0 ? "sliding_attention" : "full_attention"));
    j.set("layer_types", types);
  }
  j.set("num_attention_heads", cfg.num_heads);
  j.set("num_key_value_heads", cfg.num_kv_heads);
  j.set("head_dim", cfg.head_dim);
  j.set("intermediate_size", cfg.intermediate_size);
  j.set("vocab_size", cfg.vocab_size);
  j.set("rms_norm_eps", cfg.rms_norm_eps);
  // transformers 5's rope_parameters (kept from the original) already holds the theta(s)
  if (!j.find("rope_parameters") || j.find("rope_parameters")->is_null()) j.set("rope_theta", cfg.rope_theta);
  j.set("tie_word_embeddings", cfg.tie_word_embeddings);
  j.set("torch_dtype", "float32");
  std::erase_if(j.members(), [](const auto& kv) { return kv.first == "quantization_config"; });  // written dequantized
  return j;
}

std::vector<float> rope_inv_freq(const ModelConfig& cfg) {
  const int half = cfg.head_dim / 2;
  const RopeScaling& s = cfg.rope_scaling;
  std::vector<float> out(static_cast<size_t>(half));
  const YarnRamp ramp = yarn_ramp(s, cfg.head_dim, cfg.rope_theta);
  for (int i = 0; i < half; ++i) {
    double inv = 1.0 / std::pow(cfg.rope_theta, double(2 * i) / cfg.head_dim);
    if (s.type == "yarn") {
      // extrapolation (inv) for fast dimensions, interpolation (inv / factor) for slow ones
      const double extrapolate = 1.0 - std::clamp((i - ramp.low) / (ramp.high - ramp.low), 0.0, 1.0);
      inv = inv / s.factor * (1.0 - extrapolate) + inv * extrapolate;
    } else if (s.type == "linear") {
      inv /= s.factor;
    } else if (s.type == "llama3") {
      double old_ctx = double(s.original_max_position_embeddings);
      double low_wavelen = old_ctx / s.low_freq_factor, high_wavelen = old_ctx / s.high_freq_factor;
      double wavelen = 2 * std::numbers::pi / inv;
      if (wavelen > low_wavelen) {
        inv /= s.factor;
      } else if (wavelen >= high_wavelen) {
        double smooth = (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        inv = (1 - smooth) * inv / s.factor + smooth * inv;
      }
    }
    out[size_t(i)] = float(inv);
  }
  for (int i = 0; cfg.rope_local_theta > 0 && i < half; ++i)
    out.push_back(float(1.0 / std::pow(cfg.rope_local_theta, double(2 * i) / cfg.head_dim)));
  return out;
}

namespace {
// The per-layer pattern `v` for n layers, repeated past its length.
template <typename V>
void repeat_pattern(std::vector<V>& v, int n) {
  if (v.empty()) return;
  std::vector<V> out;
  for (int l = 0; l < n; ++l) out.push_back(v[size_t(l) % v.size()]);
  v = std::move(out);
}
}  // namespace

void ModelConfig::set_num_layers(int n) {
  repeat_pattern(layers, n);
  repeat_pattern(moe.dense_layers, n);
  num_layers = n;
}

int ModelConfig::num_moe_layers() const {
  int n = 0;
  for (int l = 0; l < num_layers; ++l) n += is_moe_layer(l);
  return n;
}

int ModelConfig::max_dense_ffn() const {
  int f = 0;
  for (int l = 0; l < num_layers; ++l) f = std::max(f, dense_ffn(l));
  return f;
}

int64_t ModelConfig::num_params() const {
  int64_t n = 0;
  for (const auto& u : build_param_schemas(*this)) n += int64_t(u.numel);
  return n;
}

int64_t ModelConfig::num_active_params() const {
  int64_t n = 0, expert = 0;
  for (const auto& u : build_param_schemas(*this)) {
    if (u.kind == UnitKind::kExpert) expert = int64_t(u.numel);  // every expert has the same shape
    else n += int64_t(u.numel);
  }
  return n + int64_t(num_moe_layers()) * moe.top_k * expert;
}

namespace {
// (query, key) pairs of causal attention over a document of n tokens, each query seeing at most
// w keys (0: all before it), as the continuous count: n^2 / 2 unwindowed (the half of the
// square the 6 x layers x seq_len x q_dim convention counts), n w - w^2 / 2 with a window w < n.
double causal_pairs(double n, double w) { return w <= 0 || w >= n ? n * n / 2 : n * w - w * w / 2; }
}  // namespace

double model_flops_per_token(const ModelConfig& c, int seq_len, int doc_len) {
  const double C = c.hidden_size, T = seq_len;
  // The sequence as documents of doc_len tokens (the last one shorter), or one of seq_len.
  const double D = doc_len > 0 && doc_len < seq_len ? doc_len : T, full = std::floor(T / D), rest = T - full * D;
  double matmul_params = double(c.vocab_size) * C, pairs = 0;
  for (int l = 0; l < c.num_layers; ++l) {  // a token's active parameters: its top_k experts
    matmul_params += double(c.qkv_dim()) * C + C * c.q_dim() + 3.0 * c.dense_ffn(l) * C;
    if (c.is_moe_layer(l))
      matmul_params += double(c.moe.num_experts) * C + double(c.moe.top_k) * 3.0 * c.moe.expert_ffn * C;
    const double w = c.layer_attention(l).window;
    pairs += full * causal_pairs(D, w) + causal_pairs(rest, w);
  }
  // QK^T and PV: 2 x 2 x q_dim a pair forward, twice that backward.
  return 6 * matmul_params + (T > 0 ? 12.0 * c.q_dim() * pairs / T : 0);
}

}  // namespace mt

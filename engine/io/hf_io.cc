#include "engine/io/hf_io.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <set>

#include "engine/base/json.h"
#include "engine/io/checkpoint.h"
#include "engine/io/hf_layout.h"

namespace mt {

namespace {

std::string name_list(const std::vector<std::string>& names) {
  constexpr size_t kShown = 12;
  std::string s;
  for (size_t i = 0; i < names.size() && i < kShown; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > kShown) s += ", ... (" + std::to_string(names.size() - kShown) + " more)";
  return s;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The file's tensors: as hf_tensors() says, MXFP4 ones as their blocks and scales.
std::vector<ExpectedTensor> expected_weights(const std::vector<HfTensor>& hf) {
  std::vector<ExpectedTensor> out;
  for (const HfTensor& t : hf) {
    if (!t.mxfp4) {
      out.push_back({t.name, t.shape});
      continue;
    }
    const int64_t parts = t.shape[0], rows = t.shape.back(), cols = t.shape[1];
    out.push_back({t.name + "_blocks", {parts, rows, cols / 32, 16}, true});
    out.push_back({t.name + "_scales", {parts, rows, cols / 32}, true});
  }
  return out;
}

// One part of a file tensor into `master` (its place in the unit): read as it is, dequantized
// (gpt-oss's MXFP4 experts), or converted from the file's layout through `part`.
Status fill_hf_part(const SafetensorsSet& set, const HfTensor& t, size_t p, std::vector<float>& part, float* master) {
  const TensorSpec& spec = *t.parts[p].second;
  if (t.parts.size() == 1 && t.layout == HfLayout::kSame) {
    const auto* e = set.find(t.name);
    return e->file->read_f32(*e->info, master);
  }
  if (t.mxfp4) {  // this part's blocks and scales: contiguous slices of the stacked tensors
    const auto* b = set.find(t.name + "_blocks");
    const auto* sc = set.find(t.name + "_scales");
    const int64_t rows = t.shape.back(), cols = t.shape[1];
    const uint64_t scales_per_part = uint64_t(rows) * uint64_t(cols / 32);
    dequantize_mxfp4(b->file->bytes(*b->info) + p * scales_per_part * 16, sc->file->bytes(*sc->info) + p * scales_per_part,
                     rows, cols, part.data());
    MT_RETURN_IF_ERROR(b->file->intact());
    MT_RETURN_IF_ERROR(sc->file->intact());
    mxfp4_part_to_ours(t.layout, spec, part.data(), master);
    return Status::Ok();
  }
  const auto* e = set.find(t.name);
  MT_RETURN_IF_ERROR(e->file->read_f32_range(*e->info, p * part.size(), part.size(), part.data()));
  part_from_file(t.layout, spec, part.data(), master);
  return Status::Ok();
}

// A weight that is NaN or infinite: named at load, not found as "loss is not finite" at step 1.
// Blocks are tested by their exponent bits (an integer OR the compiler vectorizes: the scan runs
// at memory speed), and only a block that fails is searched for the element.
Status check_finite(const float* w, size_t n, const std::string& tensor, size_t p) {
  constexpr size_t kBlock = 4096;
  for (size_t at = 0; at < n; at += kBlock) {
    const size_t end = std::min(n, at + kBlock);
    uint32_t all_ones_exponent = 0;
    for (size_t i = at; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, w + i, 4);
      all_ones_exponent |= uint32_t((bits & 0x7f800000u) == 0x7f800000u);
    }
    if (!all_ones_exponent) continue;
    for (size_t i = at; i < end; ++i)
      if (!std::isfinite(w[i]))
        return data_loss("weight '" + tensor + "' holds " + std::to_string(w[i]) + " at element " + std::to_string(i) +
                         " of its part " + std::to_string(p) + " (" + std::to_string(n) + " elements in our layout); every loss of "
                         "a model with non-finite weights is non-finite");
  }
  return Status::Ok();
}

// One part into its unit's masters (through the NVMe tier when it holds them), checked finite.
Status read_hf_part(const SafetensorsSet& set, const HfTensor& t, size_t p, std::vector<float>& part, HostStore& store) {
  const TensorSpec& spec = *t.parts[p].second;
  return store.with_master(t.parts[p].first, true, [&](float* unit) -> Status {
    float* master = unit + spec.offset;
    MT_RETURN_IF_ERROR(fill_hf_part(set, t, p, part, master));
    return check_finite(master, spec.numel, t.name, p);
  });
}

// One file tensor into the masters: directly, or part by part through a staging buffer.
Status read_hf_tensor(const SafetensorsSet& set, const HfTensor& t, HostStore& store) {
  std::vector<float> part(t.parts.size() == 1 && t.layout == HfLayout::kSame ? 0 : t.part_numel());
  for (size_t p = 0; p < t.parts.size(); ++p) MT_RETURN_IF_ERROR(read_hf_part(set, t, p, part, store));
  return Status::Ok();
}

// A file tensor to write: the master directly, or assembled part by part as the writer asks.
WriteTensor write_hf_tensor(const HfTensor& t, HostStore& store, bool bf16) {
  const DType dtype = bf16 ? DType::kBF16 : DType::kF32;
  const HostUnit& first = store.unit(t.parts[0].first);
  if (t.parts.size() == 1 && t.layout == HfLayout::kSame && first.master)  // in memory: written as it is
    return {t.name, t.shape, dtype, first.master + t.parts[0].second->offset, DType::kF32};
  // Assembled when the file is written (the fill keeps its own copy of t; parts point into the
  // schema): each part in the file's layout, through the NVMe tier when it holds the masters.
  WriteTensor w{t.name, t.shape, dtype, nullptr, DType::kF32};
  auto part = std::make_shared<std::vector<float>>(t.part_numel());
  auto held = std::make_shared<size_t>(SIZE_MAX);  // the part `part` holds
  w.fill = [t, &store, part, held](uint64_t first, size_t n, float* out) {
    const size_t per = part->size();
    for (size_t i = 0; i < n;) {
      const size_t p = size_t((first + i) / per), at = size_t((first + i) % per), take = std::min(n - i, per - at);
      if (*held != p) {
        const Status s = store.with_master(t.parts[p].first, false, [&](float* unit) {
          part_to_file(t.layout, *t.parts[p].second, unit + t.parts[p].second->offset, part->data());
          return Status::Ok();
        });
        if (!s.ok()) std::fill(part->begin(), part->end(), std::numeric_limits<float>::quiet_NaN());  // the tier's sticky error fails the export
        *held = p;
      }
      std::copy_n(part->data() + at, take, out + i);
      i += take;
    }
  };
  return w;
}

// Removes the weight files of an earlier export, so a stale index never shadows new shards.
Status remove_old_weights(const DirFd& dir) {
  MT_ASSIGN_OR_RETURN(const auto names, dir.list());
  for (const std::string& n : names) {
    const bool shard = n.rfind("model-", 0) == 0 && ends_with(n, ".safetensors") && n.find("-of-") != std::string::npos;
    if (shard || n == "model.safetensors" || n == "model.safetensors.index.json") MT_RETURN_IF_ERROR(dir.remove(n));
  }
  return Status::Ok();
}

}  // namespace

Status check_tensor_set(const SafetensorsSet& set, const std::vector<ExpectedTensor>& expected,
                        const std::function<bool(const std::string&)>& ignore) {
  std::vector<std::string> missing, unexpected, misshaped;
  std::set<std::string> wanted;
  for (const auto& e : expected) {
    wanted.insert(e.name);
    const auto* entry = set.find(e.name);
    if (!entry) {
      missing.push_back(e.name);
    } else if (entry->info->shape != e.shape) {
      misshaped.push_back(e.name + " " + shape_string(entry->info->shape) + " (expected " + shape_string(e.shape) + ")");
    } else if (e.bytes ? entry->info->dtype != DType::kU8
                       : entry->info->dtype != DType::kF32 && entry->info->dtype != DType::kBF16 &&
                             entry->info->dtype != DType::kF16) {
      misshaped.push_back(e.name + " dtype " + dtype_name(entry->info->dtype) +
                          (e.bytes ? " (expected U8)" : " (expected F32, BF16 or F16)"));
    }
  }
  for (const auto& n : set.names())
    if (!wanted.count(n) && !(ignore && ignore(n))) unexpected.push_back(n);
  if (missing.empty() && unexpected.empty() && misshaped.empty()) return Status::Ok();
  std::string msg = set.describe() + " does not match the model:";
  if (!missing.empty()) msg += " missing " + std::to_string(missing.size()) + " tensor(s): " + name_list(missing) + ";";
  if (!unexpected.empty())
    msg += " unexpected " + std::to_string(unexpected.size()) + " tensor(s): " + name_list(unexpected) + ";";
  if (!misshaped.empty()) msg += " wrong shape/dtype: " + name_list(misshaped) + ";";
  msg.pop_back();
  return invalid_argument(msg);
}

Status check_store_matches(const ModelConfig& cfg, const std::vector<ParamSchema>& units, const HostStore& store) {
  bool ok = store.num_units() == units.size();
  for (size_t i = 0; ok && i < units.size(); ++i) ok = store.unit(i).numel == units[i].numel;
  if (!ok) return invalid_argument("the host store was not built for this model config (" + cfg.architecture + ")");
  return Status::Ok();
}

namespace {

// A tied config whose file also holds lm_head.weight: transformers 4 ties them (the file's head
// unread), transformers 5 keeps a head that differs from the embedding (with a warning) — two
// different models. Accepted when the two hold the same values (as a tied model's save may
// write them), refused naming both readings otherwise.
Status check_tied_head(const SafetensorsSet& set) {
  const SafetensorsSet::Entry* head = set.find("lm_head.weight");
  const SafetensorsSet::Entry* emb = set.find("model.embed_tokens.weight");
  if (!head || !emb) return Status::Ok();  // a missing embedding is check_tensor_set's to name
  bool same = head->info->shape == emb->info->shape;
  const uint64_t n = emb->info->numel(), chunk = uint64_t(1) << 20;
  std::vector<float> a, b;
  for (uint64_t at = 0; same && at < n; at += chunk) {
    const uint64_t k = std::min(chunk, n - at);
    a.resize(k), b.resize(k);
    MT_RETURN_IF_ERROR(head->file->read_f32_range(*head->info, at, k, a.data()));
    MT_RETURN_IF_ERROR(emb->file->read_f32_range(*emb->info, at, k, b.data()));
    same = std::memcmp(a.data(), b.data(), k * sizeof(float)) == 0;
  }
  if (same) return Status::Ok();
  return invalid_argument(set.describe() + " holds an lm_head.weight that differs from model.embed_tokens.weight, but "
                          "config.json ties them (tie_word_embeddings, or the family's default): transformers 5 "
                          "keeps that head, 4 replaces it by the embedding. Set tie_word_embeddings to false to "
                          "train the file's head, or remove lm_head.weight to tie them");
}

}  // namespace

Status load_hf_weights(const std::string& model_dir, const ModelConfig& cfg, HostStore& store) {
  const auto units = build_param_schemas(cfg);
  MT_RETURN_IF_ERROR(check_store_matches(cfg, units, store));
  MT_ASSIGN_OR_RETURN(auto set, SafetensorsSet::open(model_dir));
  auto ignore = [&](const std::string& n) {
    return (cfg.tie_word_embeddings && n == "lm_head.weight") || ends_with(n, "rotary_emb.inv_freq");
  };
  const std::vector<HfTensor> hf = hf_tensors(cfg, units);
  MT_RETURN_IF_ERROR(check_tensor_set(*set, expected_weights(hf), ignore).with_context("loading weights"));
  if (cfg.tie_word_embeddings) MT_RETURN_IF_ERROR(check_tied_head(*set).with_context("loading weights"));
  for (const HfTensor& t : hf) MT_RETURN_IF_ERROR(read_hf_tensor(*set, t, store));
  store.refresh_shadows();
  return Status::Ok();
}

Status check_export_dir(const DirFd& out, bool overwrite) {
  MT_ASSIGN_OR_RETURN(const auto names, out.list());
  // is_training_checkpoint through the descriptor: a step directory, or a checkpoints root (its
  // `latest`, or its step directories)
  const bool step_dirs = std::any_of(names.begin(), names.end(), [](const std::string& n) { return parse_step_dir(n) >= 0; });
  if (out.has("latest") || out.has("trainer_state.json") || step_dirs)
    return failed_precondition("export target '" + out.path() +
                               "' is a training checkpoint; exporting into it would replace its fp32 master weights "
                               "(choose another directory)");
  if (out.has("checkpoints") || out.has(".megatrain.lock"))  // `megatrain train --out`'s directory
    return failed_precondition("export target '" + out.path() +
                               "' is a training run's directory (it holds checkpoints/); choose another directory");
  if (!overwrite && !names.empty())
    return failed_precondition("export target '" + out.path() +
                               "' already holds files; pass --overwrite to replace an earlier export there");
  return Status::Ok();
}

Status check_export_dir(const std::string& out_dir, bool overwrite) {
  std::error_code ec;
  if (!std::filesystem::exists(out_dir, ec)) return Status::Ok();
  auto out = DirFd::open(out_dir, false);
  if (!out.ok()) return out.status().with_context("export target");
  return check_export_dir(*out, overwrite);
}

Status export_hf_model(const std::string& out_dir, const ModelConfig& cfg, HostStore& store, bool bf16,
                       size_t max_shard_bytes, bool overwrite) {
  MT_ASSIGN_OR_RETURN(const DirFd out, DirFd::open(out_dir, true));  // the DirFd form checks it
  return export_hf_model(out, cfg, store, bf16, max_shard_bytes, overwrite);
}

Status export_hf_model(const DirFd& out, const ModelConfig& cfg, HostStore& store, bool bf16,
                       size_t max_shard_bytes, bool overwrite) {
  const auto units = build_param_schemas(cfg);
  MT_RETURN_IF_ERROR(check_store_matches(cfg, units, store));
  MT_RETURN_IF_ERROR(check_export_dir(out, overwrite));
  MT_RETURN_IF_ERROR(remove_old_weights(out));
  Json config = model_config_to_json(cfg);
  // The weights' dtype under both names: transformers 5 reads `dtype` first (a source config's
  // kept `dtype` loaded an fp32 export as bf16), transformers 4 reads `torch_dtype`.
  config.set("torch_dtype", bf16 ? "bfloat16" : "float32");
  config.set("dtype", bf16 ? "bfloat16" : "float32");
  MT_RETURN_IF_ERROR(write_file_durable(out, "config.json", config.dump(2) + "\n"));
  std::vector<WriteTensor> tensors;
  ModelConfig unquantized = cfg;  // what is written: gpt-oss's experts unquantized
  unquantized.moe.mxfp4 = false;
  for (const HfTensor& t : hf_tensors(unquantized, units)) tensors.push_back(write_hf_tensor(t, store, bf16));
  auto files = write_sharded_safetensors(out, "model", tensors, max_shard_bytes, {{"format", "pt"}});
  if (!files.ok()) return files.status();
  // A part the NVMe tier could not read was written as NaN: the tier's error fails the export.
  if (store.tier()) MT_RETURN_IF_ERROR(store.tier()->error().with_context("exporting the model"));
  return out.sync();
}

}  // namespace mt

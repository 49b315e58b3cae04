// Hugging Face model directories: import weights (model.safetensors or a sharded index, F32,
// BF16 or F16) into a HostStore under our schema, and export a store as a directory that
// transformers' AutoModelForCausalLM.from_pretrained loads (config.json + safetensors shards +
// model.safetensors.index.json).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/optim/host_store.h"
#include "engine/model/model_config.h"
#include "engine/io/safetensors.h"
#include "engine/base/status.h"

namespace mt {

// Loads the weights of `model_dir` (a directory, a .safetensors file or an index .json) into the
// store's master weights (and its bf16 shadow, if any). Every schema tensor must be present
// with its exact shape; missing, unexpected and mis-shaped tensors are all listed in the error,
// and nothing is written to the store unless every check passes. Ignored without error:
// lm_head.weight when tie_word_embeddings is true, and rotary_emb.inv_freq buffers.
Status load_hf_weights(const std::string& model_dir, const ModelConfig& cfg, HostStore& store);

// Writes config.json (torch_dtype float32 or bfloat16) and the master weights as F32 or BF16
// safetensors, sharded at max_shard_bytes (0 = one file; one shard is written as
// model.safetensors, several as model-0000i-of-0000n.safetensors with an index). Creates out_dir.
// out_dir must be absent or empty unless `overwrite` (then an earlier export's weight files are
// replaced); a training checkpoint is refused even with `overwrite`, since writing into it would
// replace its fp32 master weights.
Status export_hf_model(const std::string& out_dir, const ModelConfig& cfg, HostStore& store, bool bf16,
                       size_t max_shard_bytes, bool overwrite = false);
// The same into a directory held open (the daemon's ExportModel: see DirFd::open_beneath); every
// file is created, replaced and removed through the descriptor.
Status export_hf_model(const DirFd& out, const ModelConfig& cfg, HostStore& store, bool bf16,
                       size_t max_shard_bytes, bool overwrite = false);
// The export target check alone, so a caller can refuse before loading anything.
Status check_export_dir(const std::string& out_dir, bool overwrite);
Status check_export_dir(const DirFd& out, bool overwrite);

// ---- shared with checkpoints -------------------------------------------------------------------

struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
  bool bytes = false;  // U8 (MXFP4 blocks and scales), not a float dtype
};
// Checks that `set` holds exactly `expected` (names and shapes), apart from names for which
// `ignore` returns true. The error lists every missing, unexpected and mis-shaped tensor.
Status check_tensor_set(const SafetensorsSet& set, const std::vector<ExpectedTensor>& expected,
                        const std::function<bool(const std::string&)>& ignore);


// Verifies that `store` was built from the schemas of `cfg`.
Status check_store_matches(const ModelConfig& cfg, const std::vector<ParamSchema>& units, const HostStore& store);

}  // namespace mt

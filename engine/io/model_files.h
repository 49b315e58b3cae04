// Loading a trained model (the CLI's eval and export, the daemon's ExportModel): an HF model
// directory (config.json + safetensors) or a training checkpoint (a step directory or a
// checkpoints root with `latest`).
#pragma once
#include <memory>
#include <string>

#include "engine/optim/host_store.h"
#include "engine/model/model_config.h"

namespace mt {

struct ModelFiles {
  std::string dir;          // the directory holding config.json and the weights
  bool checkpoint = false;  // a training checkpoint (else an HF model directory)
};
Result<ModelFiles> find_model_files(const std::string& path);
// Reads the weights into an existing store of the config's shape (no second copy).
Status load_model_weights(const ModelFiles& files, const ModelConfig& cfg, HostStore& store);

struct LoadedModel {
  ModelConfig cfg;
  std::unique_ptr<HostStore> store;
  std::string source;  // what was read
};
Result<LoadedModel> load_model_dir(const std::string& path);

}  // namespace mt

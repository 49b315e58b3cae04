#include "engine/io/model_files.h"

#include "engine/io/checkpoint.h"
#include "engine/io/hf_io.h"

namespace mt {

Result<ModelFiles> find_model_files(const std::string& named) {
  const std::string path = checkpoints_of_run(named);
  ModelFiles f{path, is_training_checkpoint(path)};
  if (f.checkpoint) {
    MT_ASSIGN_OR_RETURN(f.dir, resolve_checkpoint(path));
  }
  return f;
}

Status load_model_weights(const ModelFiles& files, const ModelConfig& cfg, HostStore& store) {
  if (files.checkpoint) return load_checkpoint(files.dir, cfg, store).status();
  return load_hf_weights(files.dir, cfg, store);
}

Result<LoadedModel> load_model_dir(const std::string& path) {
  MT_ASSIGN_OR_RETURN(ModelFiles files, find_model_files(path));
  LoadedModel m;
  MT_ASSIGN_OR_RETURN(m.cfg, load_model_config(files.dir));
  MT_ASSIGN_OR_RETURN(m.store, HostStore::create(build_param_schemas(m.cfg), MemoryLayout::kExact, false,
                                                 default_host_allocator()));
  MT_RETURN_IF_ERROR(load_model_weights(files, m.cfg, *m.store));
  m.source = files.dir;
  return m;
}

}  // namespace mt

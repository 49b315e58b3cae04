#include "client/local/model_files.h"

#include <filesystem>

#include "engine/checkpoint.h"
#include "engine/hf_io.h"

namespace mt::cli {

Result<LoadedModel> load_model_dir(const std::string& path) {
  namespace fs = std::filesystem;
  LoadedModel m;
  const bool checkpoint = fs::exists(fs::path(path) / "latest") || fs::exists(fs::path(path) / "trainer_state.json");
  std::string dir = path;
  if (checkpoint) {
    MT_ASSIGN_OR_RETURN(dir, resolve_checkpoint(path));
  }
  MT_ASSIGN_OR_RETURN(m.cfg, load_model_config(dir));
  MT_ASSIGN_OR_RETURN(m.store, HostStore::create(build_param_schemas(m.cfg), MemoryLayout::kExact, false,
                                                 default_host_allocator()));
  if (checkpoint) {
    MT_RETURN_IF_ERROR(load_checkpoint(dir, m.cfg, *m.store).status());
  } else {
    MT_RETURN_IF_ERROR(load_hf_weights(dir, m.cfg, *m.store));
  }
  m.source = dir;
  return m;
}

}  // namespace mt::cli

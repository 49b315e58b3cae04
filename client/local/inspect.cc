// megatrain inspect PATH: the tensors (name, dtype, shape, bytes) of a safetensors file, an HF
// model directory or a training checkpoint, plus the trainer state of a checkpoint.
#include <cstdio>
#include <filesystem>

#include "client/cli.h"
#include "engine/io/checkpoint.h"
#include "engine/io/safetensors.h"

namespace mt::cli {

namespace {

int list_set(const SafetensorsSet& set, bool json, uint64_t& total) {
  for (const auto& name : set.names()) {
    const auto* e = set.find(name);
    const uint64_t bytes = e->info->end - e->info->begin;
    total += bytes;
    if (json) {
      Json shape = Json::array();
      for (int64_t d : e->info->shape) shape.items().push_back(Json(d));
      print_json(Json::object({{"event", "tensor"}, {"tensor", name}, {"dtype", dtype_name(e->info->dtype)}, {"shape", shape},
                               {"bytes", int64_t(bytes)}}));
    } else {
      std::printf("%-60s %-5s %-18s %12llu\n", name.c_str(), dtype_name(e->info->dtype),
                  shape_string(e->info->shape).c_str(), (unsigned long long)bytes);
    }
  }
  return kOk;
}

}  // namespace

int cmd_inspect(const Args& a) {
  namespace fs = std::filesystem;
  if (a.positional().size() != 1) return usage_error("inspect");
  std::string path = checkpoints_of_run(a.positional()[0]);
  if (is_training_checkpoint(path)) {  // a checkpoints root (its latest), or a step directory
    auto dir = resolve_checkpoint(path);
    if (!dir.ok()) return fail(kJobFailed, dir.status().message());
    path = *dir;
  }
  uint64_t total = 0;
  for (const char* name : {"model", "optimizer"}) {
    const bool sharded = fs::exists(fs::path(path) / (std::string(name) + ".safetensors.index.json"));
    if (name == std::string("optimizer") && !sharded && !fs::exists(fs::path(path) / "optimizer.safetensors"))
      continue;  // a checkpoint saved without optimizer state (an export, weights_only)
    auto set = SafetensorsSet::open(path, name);
    if (!set.ok()) return fail(kJobFailed, set.status().message());
    if (!a.json()) std::printf("# %s\n", (*set)->describe().c_str());
    list_set(**set, a.json(), total);
  }
  const fs::path state = fs::path(path) / "trainer_state.json";
  auto text = fs::exists(state) ? read_file(state.string()) : Result<std::string>(std::string());
  Json summary = Json::object({{"event", "summary"}, {"path", path}, {"total_bytes", int64_t(total)}});
  if (text.ok() && !text->empty())
    if (auto j = Json::parse(*text); j.ok()) summary.set("trainer_state", *j);
  if (a.json()) print_json(summary);
  else std::printf("total %llu bytes%s%s\n", (unsigned long long)total, summary.find("trainer_state") ? "\ntrainer state " : "",
                   summary.find("trainer_state") ? summary.find("trainer_state")->dump().c_str() : "");
  return kOk;
}

}  // namespace mt::cli

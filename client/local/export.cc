// megatrain export CHECKPOINT OUT_DIR: a trained model as a Hugging Face model directory
// (config.json, sharded safetensors, index) that transformers' AutoModelForCausalLM loads.
#include <cstdio>

#include "client/cli.h"
#include "engine/io/model_files.h"
#include "engine/io/hf_io.h"

namespace mt::cli {

int cmd_export(const Args& a) {
  if (a.positional().size() != 2)
    return usage_error("export");
  const std::string dtype = a.get("dtype", "bf16");
  if (dtype != "bf16" && dtype != "fp32") return fail(kUsage, "--dtype = '" + dtype + "' is not one of bf16, fp32");
  auto shard = a.size("shard-size", 5'000'000'000);
  if (!shard.ok()) return fail(kUsage, shard.status().message());
  const bool overwrite = a.has("overwrite");
  if (Status s = check_export_dir(a.positional()[1], overwrite); !s.ok()) return fail(kUsage, s.message());
  auto m = load_model_dir(a.positional()[0]);
  if (!m.ok()) return fail(kJobFailed, m.status().message());
  if (Status s = export_hf_model(a.positional()[1], m->cfg, *m->store, dtype == "bf16", *shard, overwrite); !s.ok())
    return fail(kJobFailed, s.message());
  if (a.json()) print_json(Json::object({{"event", "exported"}, {"exported", a.positional()[1]}, {"from", m->source}, {"dtype", dtype}}));
  else std::printf("exported %s -> %s (%s)\n", m->source.c_str(), a.positional()[1].c_str(), dtype.c_str());
  return kOk;
}

}  // namespace mt::cli

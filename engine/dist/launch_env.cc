#include "engine/dist/launch_env.h"

#include <cstdlib>

namespace mt {

namespace {
Result<int> parse_int(const char* name, const char* text, int lo, int hi) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < lo || v > hi)
    return invalid_argument(std::string(name) + " = '" + text + "' is not an integer in [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + "]");
  return int(v);
}
}  // namespace

Result<LaunchEnv> launch_env_from(const std::function<const char*(const char*)>& getenv_fn) {
  struct Pair {
    const char *rank, *size, *launcher;
  };
  constexpr Pair kPairs[] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "openmpi"},
                             {"PMI_RANK", "PMI_SIZE", "pmi"},
                             {"SLURM_PROCID", "SLURM_NTASKS", "slurm"},
                             {"RANK", "WORLD_SIZE", "torchrun"}};
  for (const Pair& p : kPairs) {
    const char* r = getenv_fn(p.rank);
    const char* s = getenv_fn(p.size);
    if (!r && !s) continue;
    if (!r || !s) return invalid_argument(std::string(r ? p.size : p.rank) + " is unset while " + (r ? p.rank : p.size) + " is set");
    LaunchEnv e;
    e.launcher = p.launcher;
    MT_ASSIGN_OR_RETURN(e.size, parse_int(p.size, s, 1, 1 << 20));
    MT_ASSIGN_OR_RETURN(e.rank, parse_int(p.rank, r, 0, e.size - 1));
    return e;
  }
  return LaunchEnv{};
}

Result<LaunchEnv> launch_env() {
  return launch_env_from([](const char* name) { return std::getenv(name); });
}

}  // namespace mt

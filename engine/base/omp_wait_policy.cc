#include "engine/base/omp_wait_policy.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace mt {

void use_passive_omp_wait_policy(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY")) return;
  if (const char* keep = std::getenv("MEGATRAIN_OMP_WAIT_POLICY"); keep && !std::strcmp(keep, "keep")) return;
  if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
  execv("/proc/self/exe", argv);  // returns only on failure: carry on with libgomp's default
}

}  // namespace mt

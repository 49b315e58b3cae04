#include "engine/base/omp_wait_policy.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace mt {

void use_passive_omp_wait_policy(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY")) return;
  if (const char* keep = std::getenv("MEGATRAIN_OMP_WAIT_POLICY"); keep && !std::strcmp(keep, "keep")) return;
  if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
  // The binary's own path, so that the process keeps its name (exec'ing /proc/self/exe names it
  // "exe": `pkill megatraind` then matched nothing); /proc/self/exe when it cannot be read.
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    self[n] = '\0';
    execv(self, argv);  // returns only on failure (the binary replaced since): try the link
  }
  execv("/proc/self/exe", argv);  // returns only on failure: carry on with libgomp's default
}

}  // namespace mt

// Which rank of how many this process is, as its launcher says in the environment: mpirun (Open
// MPI: OMPI_COMM_WORLD_RANK/SIZE; MPICH, Intel MPI: PMI_RANK/PMI_SIZE), Slurm's srun
// (SLURM_PROCID/SLURM_NTASKS) or torchrun-style RANK/WORLD_SIZE. A process with none of them is
// rank 0 of 1. Only MPI launchers can also carry the collectives (MPI is the transport; we build
// none of our own): `launcher` says which one set the variables.
#pragma once
#include <functional>
#include <string>

#include "engine/base/status.h"

namespace mt {

struct LaunchEnv {
  int rank = 0, size = 1;
  std::string launcher = "none";  // "openmpi", "pmi", "slurm", "torchrun" or "none"
  bool mpi() const { return launcher == "openmpi" || launcher == "pmi" || launcher == "slurm"; }
};

// Invalid (naming the variable) when a variable is set but not a rank in [0, size).
Result<LaunchEnv> launch_env_from(const std::function<const char*(const char*)>& getenv_fn);
Result<LaunchEnv> launch_env();

}  // namespace mt

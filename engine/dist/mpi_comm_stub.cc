// A build without MPI: the engine and its tests still build with CMake and a compiler alone.
#include "engine/dist/mpi_comm.h"

namespace mt {

bool mpi_built() { return false; }
Result<std::unique_ptr<Communicator>> make_mpi_world_comm(const CommOptions&) {
  return unimplemented("this build has no MPI: install Open MPI (scripts/install_deps.sh: libopenmpi-dev openmpi-bin) "
                       "and reconfigure to run several processes");
}
void mpi_finalize() {}

}  // namespace mt

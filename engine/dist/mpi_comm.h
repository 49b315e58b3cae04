// MpiComm: one rank per process over MPI (Open MPI), for several nodes (or several CPU ranks of
// one machine under `mpirun`). Host buffers (and the CPU backend's device memory, which is host
// memory); a CUDA device's buffers go through NcclComm instead.
// Every collective is non-blocking underneath (MPI_Iallreduce, ...) and polled against a deadline:
// MPI's own blocking calls would hang forever on a hung peer. Before each collective the ranks
// exchange a sequence number on a side communicator, so a timeout names the ranks that never
// arrived. A rank that dies (SIGKILL) is also reported by mpirun itself, which ends the job.
// Each MpiComm owns duplicated MPI communicators, so two of them (the optimizer thread's and the
// step loop's) may run collectives at the same time (MPI_THREAD_MULTIPLE).
#pragma once
#include <memory>

#include "engine/dist/communicator.h"

namespace mt {

// Whether this build has MPI (MEGATRAIN_HAVE_MPI).
bool mpi_built();
// A communicator over all the processes of the MPI job (MPI_COMM_WORLD, duplicated); initialises
// MPI on first use. Unimplemented in a build without MPI.
Result<std::unique_ptr<Communicator>> make_mpi_world_comm(const CommOptions& opt = {});
// Ends MPI after a run that succeeded on every rank (a no-op if it was never started). After a
// failure do not call it: MPI_Finalize waits for the other ranks; exiting non-zero lets mpirun
// end the job.
void mpi_finalize();

}  // namespace mt

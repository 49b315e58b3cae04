// NcclComm: the CUDA devices of one process (`devices: N`, one replica thread per device), each
// collective enqueued by NCCL on the stream of CommOrder's backend (Backend::native_stream): no
// host wait, ordered like any kernel. Built only with CUDA and NCCL's headers
// (MEGATRAIN_HAVE_NCCL; `pip install nvidia-nccl-cu13`, which scripts/install_deps.sh puts in
// REPO/.venv); elsewhere the factory refuses clearly. Each rank's collectives come from one
// thread (its device's), so no ncclGroupStart is needed.
//
// Failure (CommOptions::timeout_seconds; nccl_group.h has the mechanism): the communicators are
// non-blocking, and a watchdog thread watches every collective in flight. What is guaranteed:
//  * a collective that a peer never issues, or that runs longer than the timeout once its stream
//    has reached it, or a NCCL asynchronous error, fails the group within the timeout plus one
//    poll (at most 0.1 s), with an error naming the collective, its rank and device, and the
//    ranks that had not issued it (or whose stream had not reached it);
//  * the error becomes the sticky Backend::error() of every rank with a collective in flight,
//    before the communicators are aborted (ncclCommAbort): NCCL kernels waiting for a peer then
//    return, so host waits on those streams (CudaBackend::host_wait) return too, and whoever
//    checks error() after them (the optimizer, the step) refuses what they produced;
//  * every later collective of every rank, and the launch of one in progress, returns the error;
//    Communicator::abort(why) fails the group at once the same way, naming the caller's rank.
// Not guaranteed: a stream stuck in work that is not NCCL's (a hung kernel before the
// collective) stays stuck — the collectives behind it never start, so the timeout never runs
// for them; the others' do, and they fail naming that rank as "has not reached it". Not yet:
// bootstrapping across processes (ncclGetUniqueId over MPI).
#pragma once
#include <memory>
#include <vector>

#include "engine/dist/communicator.h"

namespace mt {

bool nccl_built();
// One communicator per CUDA device in `devices` (rank r drives devices[r]), initialised
// together (non-blocking, bounded by opt.timeout_seconds).
Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_comms(const std::vector<int>& devices,
                                                                   const CommOptions& opt = {});

}  // namespace mt

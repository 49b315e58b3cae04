// NcclComm: CUDA devices of one process (ncclCommInitAll), each collective enqueued by NCCL on the
// stream of CommOrder's backend (Backend::native_stream): no host wait, ordered like any kernel.
// Built only with CUDA and NCCL's headers (MEGATRAIN_HAVE_NCCL; `pip install nvidia-nccl-cu13`,
// which scripts/install_deps.sh puts in REPO/.venv); elsewhere the factory refuses clearly.
// Not yet: bootstrapping across processes (ncclGetUniqueId over MPI), and a watchdog — a hung
// peer stalls the stream, and only the backend's waits would notice.
#pragma once
#include <memory>
#include <vector>

#include "engine/dist/communicator.h"

namespace mt {

bool nccl_built();
// One communicator per CUDA device in `devices` (rank r drives devices[r]).
Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_comms(const std::vector<int>& devices);
// One thread issuing the collectives of several devices brackets them with these (ncclGroupStart/
// ncclGroupEnd), else the first one waits for the others forever.
Status nccl_group_start();
Status nccl_group_end();

}  // namespace mt

// A build without NCCL (no CUDA, or no nccl.h found).
#include "engine/dist/nccl_comm.h"

namespace mt {

bool nccl_built() { return false; }
Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_comms(const std::vector<int>&, const CommOptions&) {
  return unimplemented("this build has no NCCL (its headers were not found at build time): build with CUDA and "
                       "`pip install nvidia-nccl-cu13` into REPO/.venv (scripts/install_deps.sh), then reconfigure");
}

}  // namespace mt

// A build without NCCL (no CUDA, or no nccl.h found).
#include "engine/dist/nccl_comm.h"

namespace mt {

bool nccl_built() { return false; }
Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_comms(const std::vector<int>&) {
  return unimplemented("this build has no NCCL: build with CUDA and `pip install nvidia-nccl-cu13` into REPO/.venv "
                       "(scripts/install_deps.sh), then reconfigure");
}

Status nccl_group_start() { return unimplemented("this build has no NCCL"); }
Status nccl_group_end() { return unimplemented("this build has no NCCL"); }

}  // namespace mt

// Built only without CUDA: the factory refuses clearly.
#include "engine/backend/cuda/cuda_backend.h"

namespace mt {

bool cuda_available() { return false; }
std::string cuda_describe() { return "CUDA: not built into this engine (configure with -DMEGATRAIN_CUDA=ON)"; }
uint64_t cuda_device_memory() { return 0; }
uint64_t cuda_free_device_memory() { return 0; }
uint64_t cuda_attention_workspace_bytes(int, int, int, int, int) { return 0; }
std::string cuda_attention_warning() { return ""; }
std::string cuda_attention_kernel_name() { return "none"; }
std::string cuda_cudnn_describe() { return "cuDNN: CUDA not built"; }
uint64_t cuda_cudnn_attention_calls() { return 0; }
CudnnBuildTotals cuda_cudnn_graph_builds() { return {}; }

Result<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions&) {
  return unimplemented("backend = cuda is not built into this engine (configure with -DMEGATRAIN_CUDA=ON)");
}

}  // namespace mt

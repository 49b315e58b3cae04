// CudnnAttention (attention_cudnn.cuh) in a build without the cuDNN frontend: every call is
// refused by name, so MEGATRAIN_ATTENTION=cudnn falls back to our own kernels with a warning.
#include "kernels/cuda/attention_cudnn.cuh"

namespace mt::cuda {

struct CudnnAttention::Impl {};

bool cudnn_built() { return false; }
uint64_t cudnn_attention_calls() { return 0; }
CudnnGraphBuilds cudnn_graph_builds() { return {}; }
size_t cudnn_runtime_version() { return 0; }
bool cudnn_pads_documents() { return false; }
std::string cudnn_describe() {
  return "cuDNN: not in this build (needs the cuDNN frontend headers: scripts/install_deps.sh, and libcudnn)";
}
size_t cudnn_attention_workspace_bytes(int, int, int, int, int) { return 0; }
bool cudnn_dp_past_reservation(int, int, int) { return false; }
std::string cudnn_validate_graphs(const AttentionShape&, const DocumentSpans*, int, bool, CudnnGraphFault) {
  return cudnn_describe();
}
std::string cudnn_check_engines(const AttentionShape&, const DocumentSpans*, int, bool, const std::string&,
                                std::map<std::string, CudnnEngineCheck>&) {
  return cudnn_describe();
}
std::string cudnn_describe_device(int, std::string&) { return cudnn_describe(); }

CudnnAttention::CudnnAttention(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudnnAttention::~CudnnAttention() = default;

CudaStatus CudnnAttention::create(std::unique_ptr<CudnnAttention>&, void*, size_t, std::optional<bool>) {
  return {"cuDNN attention (this build has no cuDNN frontend)", int(cudaErrorNotSupported), false};
}
bool CudnnAttention::supports(const AttentionShape&, const DocumentSpans*, std::string* why) {
  if (why) *why = cudnn_describe();
  return false;
}
CudaStatus CudnnAttention::forward(__nv_bfloat16*, float*, const __nv_bfloat16*, const AttentionShape&,
                                   const DocumentSpans*, cudaStream_t) {
  return {"cuDNN SDPA forward (not in this build)", int(cudaErrorNotSupported), false};
}
CudaStatus CudnnAttention::backward(__nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*,
                                    const float*, const AttentionShape&, const DocumentSpans*, cudaStream_t) {
  return {"cuDNN SDPA backward (not in this build)", int(cudaErrorNotSupported), false};
}
size_t CudnnAttention::workspace_used() const { return 0; }
bool CudnnAttention::pads_documents() const { return false; }

}  // namespace mt::cuda

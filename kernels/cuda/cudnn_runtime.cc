// The cuDNN library behind CudnnAttention's graphs (cudnn_runtime.h).
#include "kernels/cuda/cudnn_runtime.h"

#include <cudnn.h>

namespace mt::cuda::cudnn_runtime {

struct Handle {
  cudnnHandle_t h = nullptr;
};

Handle* create() {
  auto* h = new Handle;
  if (cudnnCreate(&h->h) == CUDNN_STATUS_SUCCESS) return h;
  delete h;
  return nullptr;
}

void destroy(Handle* h) {
  if (h && h->h) cudnnDestroy(h->h);
  delete h;
}

fe::error_t build(fe::graph::Graph& g, Handle* h) {
  if (auto e = g.validate(); !e.is_good()) return e;
  if (auto e = g.build_operation_graph(h->h); !e.is_good()) return e;
  if (auto e = g.create_execution_plans({fe::HeurMode_t::A}); !e.is_good()) return e;
  if (auto e = g.check_support(h->h); !e.is_good()) return e;
  return g.build_plans(h->h);
}

fe::error_t workspace_size(fe::graph::Graph& g, int64_t& bytes) { return g.get_workspace_size(bytes); }

fe::error_t execute(fe::graph::Graph& g, Handle* h, std::unordered_map<int64_t, void*>& pack, void* workspace,
                    cudaStream_t stream) {
  if (cudnnSetStream(h->h, stream) != CUDNN_STATUS_SUCCESS)
    return {fe::error_code_t::CUDNN_BACKEND_API_FAILED, "cudnnSetStream"};
  return g.execute(h->h, pack, workspace);
}

}  // namespace mt::cuda::cudnn_runtime

// The cuDNN library behind CudnnAttention's graphs (cudnn_runtime.h).
#include "kernels/cuda/cudnn_runtime.h"

#include <cudnn.h>

#include <string>

namespace mt::cuda::cudnn_runtime {

struct Handle {
  cudnnHandle_t h = nullptr;
};

namespace {

// The library's last error message (cudnnGetLastErrorString: this thread's latest), "" if none.
// A refusal's status alone rarely says which knob was refused; this usually does.
std::string last_error() {
  char msg[1024] = "";
  cudnnGetLastErrorString(msg, sizeof msg);
  return msg;
}

// "CUDNN_STATUS_...: <the library's last error message>".
std::string describe(cudnnStatus_t st) {
  const std::string last = last_error();
  return std::string(cudnnGetErrorString(st)) + (last.empty() ? "" : ": " + last);
}

// A frontend failure with the library's own words appended (the frontend's names the step).
fe::error_t with_last_error(fe::error_t e) {
  if (e.is_good()) return e;
  const std::string last = last_error();
  if (!last.empty()) e.err_msg += " (cuDNN: " + last + ")";
  return e;
}

}  // namespace

Handle* create(std::string& why) {
  auto* h = new Handle;
  const cudnnStatus_t st = cudnnCreate(&h->h);
  if (st == CUDNN_STATUS_SUCCESS) return h;
  why = describe(st);
  delete h;
  return nullptr;
}

void destroy(Handle* h) {
  if (h && h->h) cudnnDestroy(h->h);
  delete h;
}

fe::error_t build(fe::graph::Graph& g, Handle* h) {
  if (auto e = g.validate(); !e.is_good()) return e;  // the frontend's own check: no library words
  fe::error_t e = g.build_operation_graph(h->h);
  if (e.is_good()) e = g.create_execution_plans({fe::HeurMode_t::A});
  if (e.is_good()) e = g.check_support(h->h);
  if (e.is_good()) e = g.build_plans(h->h);
  return with_last_error(e);
}

fe::error_t workspace_size(fe::graph::Graph& g, int64_t& bytes) { return g.get_workspace_size(bytes); }

fe::error_t execute(fe::graph::Graph& g, Handle* h, std::unordered_map<int64_t, void*>& pack, void* workspace,
                    cudaStream_t stream) {
  if (const cudnnStatus_t st = cudnnSetStream(h->h, stream); st != CUDNN_STATUS_SUCCESS)
    return {fe::error_code_t::CUDNN_BACKEND_API_FAILED, "cudnnSetStream: " + describe(st)};
  return with_last_error(g.execute(h->h, pack, workspace));
}

}  // namespace mt::cuda::cudnn_runtime

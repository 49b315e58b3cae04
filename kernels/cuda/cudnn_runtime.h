// What CudnnAttention (attention_cudnn.cc) asks of the cuDNN library once its graphs are
// described: a handle, a graph built for the device, its workspace and its run on a stream.
// cudnn_runtime.cc is the library; tests/cuda_emu/cudnn_emu.cc runs the same graphs, from the
// frontend's own description of them, by a reference interpreter on the emulated device, so that
// everything of the cuDNN path but the library itself runs on a machine without a GPU.
#pragma once
#include <cuda_runtime.h>
#include <cudnn_frontend.h>

#include <cstdint>
#include <string>
#include <unordered_map>

namespace mt::cuda::cudnn_runtime {

namespace fe = cudnn_frontend;

struct Handle;
// nullptr when the library cannot start (no device, a driver it does not take), with cuDNN's
// words in `why`: the status's name and the library's last error message.
Handle* create(std::string& why);
void destroy(Handle* h);
// validate .. build_plans, the steps graph->build() takes; the first failure's message (with
// the library's last error message, where it has one).
fe::error_t build(fe::graph::Graph& g, Handle* h);
fe::error_t workspace_size(fe::graph::Graph& g, int64_t& bytes);
// Enqueues the graph on `stream` with the tensors of `pack` (uid -> device pointer).
fe::error_t execute(fe::graph::Graph& g, Handle* h, std::unordered_map<int64_t, void*>& pack, void* workspace,
                    cudaStream_t stream);

}  // namespace mt::cuda::cudnn_runtime

// Attention through cuDNN's fused SDPA (flash attention behind the cuDNN frontend's graph API):
// the kernels/attention.h contract for bf16 storage — causal, GQA, scale 1/sqrt(D), fp32 lse
// in the same [B, H, T] layout as our kernels, dqkv overwritten — with the backward built
// deterministic (bit-reproducible, as resume and streaming = resident need).
//  * One document per row: one dense call over [B, H, T, D] views of the fused qkv rows.
//  * Packed documents: each row's documents become ragged batches (cuDNN's THD layout:
//    per-document lengths and ragged offsets, never a T x T mask), calls of one row each, their
//    statistics token-major in the workspace ([B, T, H], the layout NVIDIA tests for ragged
//    Stats) and transposed to ours after the forward and before the backward.
// Graphs are built once per shape (a call's document count, a power of two — padded with empty
// documents where cuDNN takes them, else a group split into power-of-two calls — and its longest
// document rounded up to one, so few graphs serve every batch) and cached; a shape cuDNN cannot run, or
// whose workspace exceeds the one the caller reserved, is refused with the reason, and the
// caller falls back to our own kernels. Without the cuDNN frontend at build time every call is
// refused by name (attention_cudnn_stub.cc).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cuda/status.cuh"

namespace mt::cuda {

// True when this build has the cuDNN path (the frontend headers and libcudnn were found).
bool cudnn_built();
// "cuDNN 9.19.0 (built against 9.19.0, frontend 1.32.0)"; "cuDNN: not in this build" without it.
std::string cudnn_describe();
// The runtime library's version as cudnnGetVersion() (e.g. 91900), 0 without cuDNN.
size_t cudnn_runtime_version();
// Whether packed rows' calls pad their batch with empty documents to a power of two or hold
// exactly their documents, in power-of-two calls (attention_ragged.h: push_group): padded from cuDNN 9.25, the
// first to take zero-length sequences. MEGATRAIN_CUDNN_PAD_DOCUMENTS=0 or 1 forces it (the
// lease's check of what an older library does with them). cudnn_describe() names the choice.
bool cudnn_pads_documents();

// Device memory to reserve for the graphs of one micro-batch of B rows of T tokens: the dP
// matrix of the deterministic backward (cuDNN < 9.25 keeps it whole on sm_90: B x H x T^2 bf16,
// nothing past 48 GiB), GQA's full-head dK/dV, the dQ accumulator and softmax sums, packed
// rows' token-major statistics (B x T x H fp32), the ragged index arrays, and a fixed margin. A graph that asks for more is refused (and the call falls
// back to our kernels): the planner's count stays an upper bound of what the device holds.
size_t cudnn_attention_workspace_bytes(int B, int T, int H, int KVH, int D);
// Whether that dP is past the 48 GiB reservation (then nothing is reserved for it, and cuDNN's
// deterministic backward refuses the shape: our kernels run it). A documented limit, not a fault.
bool cudnn_dp_past_reservation(int B, int T, int H);

// cuDNN attention calls (forwards and backwards) this process has enqueued: tests and benches
// check that a run said to use cuDNN did (a refused call falls back silently but for one warning).
uint64_t cudnn_attention_calls();
// Graph pairs (forward + backward) this process has built or tried to (a shape cuDNN refuses
// counts too), and the host seconds their builds took: a new shape builds in the middle of a
// step (packed documents: one pair per bucket of document count and longest document), so step
// benches report both.
struct CudnnGraphBuilds {
  uint64_t count = 0;
  double seconds = 0;
};
CudnnGraphBuilds cudnn_graph_builds();

struct AttentionShape {
  int B, T, H, KVH, D;
  AttentionOptions opt = {};  // sliding window (cuDNN's diagonal band) and score scale
};

// A fault planted in the graphs cudnn_validate_graphs builds, for the test of the check itself:
// kOutputRows declares the forward's O one row longer than the queries (validate() accepts it;
// cuDNN's matmul rejects it when the graph is lowered).
enum class CudnnGraphFault { kNone, kOutputRows };

// The cuDNN frontend's own checks (Graph::validate) of the graph pair every call of this shape and
// these documents (host starts) needs, for a device of compute capability `sm` (90: sm_90), then
// their lowering (Graph::build_operation_graph without a handle, cuDNN >= 9.8: the composite
// SDPA expanded into its matmuls, masks, softmax and GQA reductions, every backend descriptor
// finalized by libcudnn), without a device: "" when all pass, else the first refusal. The
// engines' answer for a described device is cudnn_check_engines' (below); building the plans
// (CudnnAttention::supports) needs the device. This catches on any machine a graph the frontend
// or the backend would refuse on the lease.
// `pad_documents`: which batching of packed rows (cudnn_pads_documents) to check.
std::string cudnn_validate_graphs(const AttentionShape& s, const DocumentSpans* docs, int sm, bool pad_documents,
                                  CudnnGraphFault fault = CudnnGraphFault::kNone);

// What cuDNN's engines answer for one graph on a described device (cudnn_check_engines).
struct CudnnEngineCheck {
  std::vector<std::string> engines;  // the engine configs heuristics (mode A) offered, by name
  std::string refused;               // empty when check_support found one the device can run
};
// The graph pair of every call of this shape and these documents (as cudnn_validate_graphs), taken
// past lowering without a device: cuDNN's heuristics (mode A, as CudnnAttention builds) and
// check_support for the device `device_json` describes (cudnn_frontend::DeviceProperties'
// serialization, cuDNN >= 9.11; tests/fixtures/cudnn/), compute capability `sm`. Each graph goes
// into `checked` under its name ("forward b=1 s=4096 ..."), once: a name already there is not
// asked again. "" when every graph has an engine, else the first refusal with cuDNN's message.
// cuDNN offers its runtime-compiled engines (its SDPA on sm_90) only where libcuda.so.1 loads: a
// machine without a driver needs the CUDA toolkit's stub loaded first (the CPU test does). The
// plans themselves are not built: that loads each kernel into the driver (cuLibraryLoadData).
std::string cudnn_check_engines(const AttentionShape& s, const DocumentSpans* docs, int sm, bool pad_documents,
                                const std::string& device_json, std::map<std::string, CudnnEngineCheck>& checked);
// The serialization of device `device`'s properties (cudnn_frontend::DeviceProperties, cuDNN >=
// 9.11) into `json`: "" on success, else why not (no device, an older library, no cuDNN).
std::string cudnn_describe_device(int device, std::string& json);

class CudnnAttention {
 public:
  // Refuses, by name, a build without cuDNN, a runtime library older than the headers this
  // was built with (a mismatch fails at run time, not at link), or a failed cudnnCreate.
  // `workspace` (device, `workspace_bytes`) is the caller's, used on the stream of each call.
  // `pad_documents`: the batching of packed rows for this instance's life; unset, the runtime's
  // (cudnn_pads_documents), which tests override to run both.
  static CudaStatus create(std::unique_ptr<CudnnAttention>& out, void* workspace, size_t workspace_bytes,
                           std::optional<bool> pad_documents = std::nullopt);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Builds (first time per shape) the forward and backward graphs a call with this shape and
  // these documents needs; false, with the reason in `why`, when cuDNN cannot run it. The
  // answer for a shape never changes, so a forward it accepted has its backward too.
  bool supports(const AttentionShape& s, const DocumentSpans* docs, std::string* why);
  // As cuda::attention_forward / attention_backward; the shape must have been accepted.
  CudaStatus forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, const AttentionShape& s,
                     const DocumentSpans* docs, cudaStream_t stream);
  CudaStatus backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                      const __nv_bfloat16* out, const float* lse, const AttentionShape& s, const DocumentSpans* docs,
                      cudaStream_t stream);
  // The largest workspace any graph built so far asked for (benches report it).
  size_t workspace_used() const;
  // The batching of packed rows chosen at create.
  bool pads_documents() const;

  struct Impl;

 private:
  explicit CudnnAttention(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The ragged index arrays of one row for cuDNN (attention_cudnn_meta.cu), on `stream`, from the
// device spans: seq[batch] and the three offset arrays of batch + 1 entries, each entry as
// ragged::entry (attention_ragged.h) computes it.
CudaStatus cudnn_ragged_meta(int32_t* seq, int64_t* off_qkv, int64_t* off_out, int64_t* off_lse,
                             const int32_t* starts, int first, int count, int batch, int row, const AttentionShape& s,
                             cudaStream_t stream);
// Packed rows' statistics between cuDNN's token-major [B, T, H] (attention_ragged.h:
// stats_index) and our [B, H, T] lse (attention_cudnn_meta.cu): after the forward, before the
// backward.
CudaStatus cudnn_stats_to_head_major(float* lse, const float* stats, int B, int T, int H, cudaStream_t stream);
CudaStatus cudnn_stats_to_token_major(float* stats, const float* lse, int B, int T, int H, cudaStream_t stream);

}  // namespace mt::cuda

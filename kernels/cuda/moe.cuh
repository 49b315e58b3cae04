// CUDA mixture-of-experts routing and token permutation (kernels/moe.h contract), with the CPU
// names and argument order plus scratch (where needed) and a trailing cudaStream_t. T = float or
// __nv_bfloat16 storage of logits and activations; router weights, statistics and their
// gradients are fp32; every bf16 output is rounded once from fp32 math.
//
// Determinism: every output is bit-reproducible run to run, on any GPU — no float atomics.
//  * the router's statistics (stats +=) are summed per fixed block of tokens (token order within
//    each of a block's warps, then the warps in order) and the blocks' partials in block order;
//  * the sort is CUB's radix sort (stable, deterministic) of the expert indices;
//  * a scatter's slots go to distinct tokens (below), so no two threads add to one element.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/status.cuh"
#include "kernels/moe.h"

namespace mt::cuda {

// The largest E (experts) the router kernels take: each of a block's 4 warps keeps a token's E
// probabilities and its running statistics in shared memory (48 E bytes in 48 KiB).
inline constexpr int kMoeMaxExperts = 1000;

// Floats of scratch moe_route_forward needs for its statistics' partials (0 when stats is not
// kept: pass nullptr then).
size_t moe_route_forward_scratch(const RouterShape& s);

// One warp per token: softmax over E in fp32, the top k by repeated argmax (ties to the lower
// index, as the CPU reference; NaN ranks below every number), the weights per s.kind and
// s.renormalize; idx and w overwritten; stats [2E] (nullptr: not kept) += the slots routed to
// each expert and the sums of softmax(logits) (deterministic, above). scratch holds
// moe_route_forward_scratch(s) floats when stats is given.
template <typename T>
CudaStatus moe_route_forward(int32_t* idx, float* w, float* stats, const T* logits, const RouterShape& s,
                             float* scratch, cudaStream_t stream);

// One warp per token, the CPU reference's math; dlogits [N, E] overwritten.
template <typename T>
CudaStatus moe_route_backward(T* dlogits, const float* dw, const T* logits, const int32_t* idx, const float* w,
                              const float* counts, float aux_scale, const RouterShape& s, cudaStream_t stream);

// *bytes = the scratch moe_sort needs for N * k slots: the slot indices, the sorted expert
// indices and CUB's radix-sort storage (about 16 bytes a slot). CUB sizes its storage for the
// current device, so this asks the runtime (and fails without a device).
CudaStatus moe_sort_scratch(size_t* bytes, int N, int E, int k);

// rows and offsets as the CPU counting sort: cub::DeviceRadixSort::SortPairs of (expert, slot)
// on the ceil(log2 E) low bits of the expert — stable, so slots stay ascending within an expert
// — then offsets[e] by binary search of the sorted experts. O(N k) work in one or two radix
// passes. scratch holds moe_sort_scratch(N, E, k) bytes.
CudaStatus moe_sort(int32_t* rows, int32_t* offsets, const int32_t* idx, int N, int E, int k, void* scratch,
                    cudaStream_t stream);

// out [n, C] = x[rows[i] / k] (overwritten; an exact copy).
template <typename T>
CudaStatus moe_gather(T* out, const T* x, const int32_t* rows, int n, int C, int k, cudaStream_t stream);

// out[rows[i] / k] += w[rows[i]] * y[i] (w nullptr: += y[i]), rounded to T once per call. The
// n slots of one call are one expert's, so no two of them belong to the same token (a token's k
// experts are distinct): each output row has one writer and needs no atomics.
template <typename T>
CudaStatus moe_scatter(T* out, const T* y, const int32_t* rows, const float* w, int n, int C, int k,
                       cudaStream_t stream);

// The weighted scatter's backward behind the down projection (kernels/moe.h): on entry dy[i] =
// dout[rows[i] / k] and dh[i] = dy[i] W; writes dw[rows[i]] = dh[i] . h[i] + dy[i] . b (fp32
// dot, a warp per row; b may be nullptr) and scales dh[i], dy[i] by w[rows[i]] in place.
template <typename T>
CudaStatus moe_weight_backward(float* dw, T* dh, T* dy, const T* h, const T* b, const int32_t* rows, const float* w,
                               int n, int F, int C, cudaStream_t stream);

// Qwen2-MoE's shared expert gate: out[t] += sigmoid(g[t]) * y[t]; the backward overwrites dy
// and dg (a warp per token for dout . y).
template <typename T>
CudaStatus sigmoid_gate_forward(T* out, const T* y, const T* g, int N, int C, cudaStream_t stream);
template <typename T>
CudaStatus sigmoid_gate_backward(T* dy, T* dg, const T* dout, const T* y, const T* g, int N, int C,
                                 cudaStream_t stream);

}  // namespace mt::cuda

// cudnn_ragged_meta (attention_cudnn.cuh): one row's ragged index arrays, built on the device
// from the spans the executor uploaded, so no call waits for the host.
#include "kernels/cuda/attention_cudnn.cuh"

namespace mt::cuda {
namespace {

__global__ void ragged_meta_kernel(int32_t* seq, int64_t* off_qkv, int64_t* off_out, int64_t* off_lse,
                                   const int32_t* starts, int first, int count, int batch, int row, AttentionShape s) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i > batch) return;
  const int64_t row0 = int64_t(row) * s.T;                       // the row's first token
  const int d = i < count ? i : count;                          // padding entries: empty, at the row's end
  const int64_t tok = starts[first + d];                        // first token of document d (or the row's end)
  const int64_t t0 = tok - row0;                                // its index in the row
  const int64_t qkv_row = int64_t(s.H + 2 * s.KVH) * s.D, out_row = int64_t(s.H) * s.D;
  // Offsets are relative to the row's own base pointers (qkv, out and lse of this row).
  off_qkv[i] = t0 * qkv_row;
  off_out[i] = t0 * out_row;
  off_lse[i] = t0;  // the row's lse is [H, T]: a document's statistics start at its first token
  if (i < batch) seq[i] = i < count ? starts[first + i + 1] - starts[first + i] : 0;
}

}  // namespace

CudaStatus cudnn_ragged_meta(int32_t* seq, int64_t* off_qkv, int64_t* off_out, int64_t* off_lse,
                             const int32_t* starts, int first, int count, int batch, int row, const AttentionShape& s,
                             cudaStream_t stream) {
  if (count < 1 || batch < count) return invalid_value("cudnn_ragged_meta: bad document count");
  const int n = batch + 1, threads = 256;
  clear_last_error();
  ragged_meta_kernel<<<(n + threads - 1) / threads, threads, 0, stream>>>(seq, off_qkv, off_out, off_lse, starts,
                                                                           first, count, batch, row, s);
  return launched("ragged_meta_kernel");
}

}  // namespace mt::cuda

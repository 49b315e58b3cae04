// cudnn_ragged_meta (attention_cudnn.cuh): one row's ragged index arrays, built on the device
// from the spans the executor uploaded, so no call waits for the host.
#include "kernels/cuda/attention_cudnn.cuh"
#include "kernels/cuda/attention_ragged.h"

namespace mt::cuda {
namespace {

__global__ void ragged_meta_kernel(int32_t* seq, int64_t* off_qkv, int64_t* off_out, int64_t* off_lse,
                                   const int32_t* starts, int first, int count, int batch, int row,
                                   ragged::Geometry g) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i > batch) return;
  const ragged::Entry e = ragged::entry(starts, first, count, row, g, i);
  off_qkv[i] = e.qkv;
  off_out[i] = e.out;
  off_lse[i] = e.lse;
  if (i < batch) seq[i] = e.seq;
}

}  // namespace

CudaStatus cudnn_ragged_meta(int32_t* seq, int64_t* off_qkv, int64_t* off_out, int64_t* off_lse,
                             const int32_t* starts, int first, int count, int batch, int row, const AttentionShape& s,
                             cudaStream_t stream) {
  if (count < 1 || batch < count) return invalid_value("cudnn_ragged_meta: bad document count");
  const int n = batch + 1, threads = 256;
  clear_last_error();
  ragged_meta_kernel<<<(n + threads - 1) / threads, threads, 0, stream>>>(seq, off_qkv, off_out, off_lse, starts,
                                                                           first, count, batch, row,
                                                                           ragged::Geometry{s.T, s.H, s.KVH, s.D});
  return launched("ragged_meta_kernel");
}

}  // namespace mt::cuda

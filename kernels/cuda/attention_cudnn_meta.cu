// cudnn_ragged_meta (attention_cudnn.cuh): one row's ragged index arrays, built on the device
// from the spans the executor uploaded, so no call waits for the host; and the packed rows'
// statistics between cuDNN's token-major layout and ours (cudnn_stats_to_*).
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

// One thread an element, reading or writing the token-major side in order; the other side is
// strided by T, which costs little: B x T x H floats, a few MiB at most, once a call.
template <bool kToHeadMajor>
__global__ void stats_transpose_kernel(float* dst, const float* src, int64_t n, int T, int H) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t j = ragged::stats_index(i, T, H);
  if (kToHeadMajor) dst[j] = src[i];
  else dst[i] = src[j];
}

template <bool kToHeadMajor>
CudaStatus stats_transpose(float* dst, const float* src, int B, int T, int H, cudaStream_t stream) {
  const int64_t n = int64_t(B) * T * H;
  if (n <= 0) return invalid_value("cudnn_stats_to_*: empty statistics");
  const int threads = 256;
  clear_last_error();
  stats_transpose_kernel<kToHeadMajor><<<unsigned((n + threads - 1) / threads), threads, 0, stream>>>(dst, src, n, T, H);
  return launched("stats_transpose_kernel");
}

}  // namespace

CudaStatus cudnn_stats_to_head_major(float* lse, const float* stats, int B, int T, int H, cudaStream_t stream) {
  return stats_transpose<true>(lse, stats, B, T, H, stream);
}
CudaStatus cudnn_stats_to_token_major(float* stats, const float* lse, int B, int T, int H, cudaStream_t stream) {
  return stats_transpose<false>(stats, lse, B, T, H, stream);
}

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

// Embedding on CUDA. Backward: block (bucket b, channel range) owns the dwte rows of tokens with
// token % kBuckets == b over its channels and scans all tokens in order (staged in shared
// memory), adding each matching row — per element, contributions arrive in token order.
#include <cuda_bf16.h>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/embedding.cuh"

namespace mt::cuda {

namespace {

constexpr int kBuckets = 64;
constexpr int kThreads = 128;  // channels per block
constexpr int kStage = 1024;   // tokens staged in shared memory at a time

template <typename T>
__global__ void embedding_forward_kernel(T* out, const int32_t* tokens, const T* wte, int N, int C) {
  MT_FOR_ROWS(n, N) {
    const T* row = wte + size_t(tokens[n]) * C;
    T* o = out + size_t(n) * C;
    MT_FOR_COLS(c, C) o[c] = row[c];
  }
}

template <typename T, typename G>
__global__ void embedding_backward_kernel(G* dwte, const T* dout, const int32_t* tokens, int N, int C) {
  __shared__ int32_t tok[kStage];
  const int bucket = blockIdx.y;
  const int c = blockIdx.x * kThreads + threadIdx.x;
  for (int n0 = 0; n0 < N; n0 += kStage) {
    const int len = min(kStage, N - n0);
    __syncthreads();
    for (int i = threadIdx.x; i < len; i += kThreads) tok[i] = tokens[n0 + i];
    __syncthreads();
    if (c >= C) continue;
    for (int i = 0; i < len; ++i) {
      const int t = tok[i];
      if (t % kBuckets != bucket) continue;
      G* dst = dwte + size_t(t) * C + c;
      *dst = detail::st<G>(detail::ld(*dst) + detail::ld(dout[size_t(n0 + i) * C + c]));
    }
  }
}

}  // namespace

template <typename T>
CudaStatus embedding_forward(T* out, const int32_t* tokens, const T* wte, int N, int C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return {};
  clear_last_error();
  embedding_forward_kernel<<<detail::rows_grid(N, C, 256), 256, 0, stream>>>(out, tokens, wte, N, C);
  return launched("embedding_forward_kernel");
}

template <typename T, typename G>
CudaStatus embedding_backward(G* dwte, const T* dout, const int32_t* tokens, int N, int C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return {};
  clear_last_error();
  embedding_backward_kernel<<<dim3((C + kThreads - 1) / kThreads, kBuckets), kThreads, 0, stream>>>(dwte, dout, tokens,
                                                                                                    N, C);
  return launched("embedding_backward_kernel");
}

#define MT_INSTANTIATE(T, G)                                                                      \
  template CudaStatus embedding_forward<T>(T*, const int32_t*, const T*, int, int, cudaStream_t); \
  template CudaStatus embedding_backward<T, G>(G*, const T*, const int32_t*, int, int, cudaStream_t);
MT_INSTANTIATE(float, float)
MT_INSTANTIATE(__nv_bfloat16, float)
#undef MT_INSTANTIATE

}  // namespace mt::cuda

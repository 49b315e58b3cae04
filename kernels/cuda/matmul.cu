// Dense layers on cuBLASLt: forward = bias broadcast + GEMM (beta = 1); backward = two
// accumulating GEMMs and a deterministic column sum for the bias. In bf16 the forward's bias
// is exact in the bf16 output, so the GEMM's beta = 1 reads it back exactly and out is
// rounded once; dinp (bf16, beta = 1) likewise; dweight and dbias are G = fp32.
#include <cuda_bf16.h>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/matmul.cuh"

namespace mt::cuda {

namespace {

template <typename T>
__global__ void broadcast_rows(T* out, const T* bias, int N, int OC) {
  const size_t n = size_t(N) * OC;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = bias[i % OC];
}

// dbias[c] += sum over rows of dout[:, c], rows in order: one thread per column, 8 columns of
// ILP per warp load. Only QKV biases (Qwen) use it; fine for their OC.
template <typename G, typename T>
__global__ void column_sum_add(G* dbias, const T* dout, int N, int OC) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= OC) return;
  float acc = 0.f;
  for (int n = 0; n < N; ++n) acc += detail::ld(dout[size_t(n) * OC + c]);
  dbias[c] = detail::st<G>(detail::ld(dbias[c]) + acc);
}

}  // namespace

template <typename T>
CudaStatus matmul_forward(T* out, const T* inp, const T* w, const T* bias, int N, int C, int OC, GemmContext& ctx,
                          cudaStream_t stream) {
  if (N <= 0 || OC <= 0) return {};
  if (bias) {
    clear_last_error();
    broadcast_rows<<<detail::blocks_for(size_t(N) * OC, 256), 256, 0, stream>>>(out, bias, N, OC);
    MT_CUDA_TRY(launched("broadcast_rows"));
  }
  return gemm<T>(false, true, N, OC, C, 1.f, inp, C, w, C, bias ? 1.f : 0.f, out, OC, ctx, stream);
}

template <typename T, typename G>
CudaStatus matmul_backward(T* dinp, G* dw, G* db, const T* dout, const T* inp, const T* w, int N, int C, int OC,
                           GemmContext& ctx, cudaStream_t stream) {
  if (N <= 0) return {};
  if (dinp) MT_CUDA_TRY(gemm<T>(false, false, N, C, OC, 1.f, dout, OC, w, C, 1.f, dinp, C, ctx, stream));
  if (dw) MT_CUDA_TRY(gemm<T>(true, false, OC, C, N, 1.f, dout, OC, inp, C, 1.f, dw, C, ctx, stream));
  if (db) {
    clear_last_error();
    column_sum_add<<<(OC + 127) / 128, 128, 0, stream>>>(db, dout, N, OC);
    MT_CUDA_TRY(launched("column_sum_add"));
  }
  return {};
}

#define MT_INSTANTIATE(T, G)                                                                                  \
  template CudaStatus matmul_forward<T>(T*, const T*, const T*, const T*, int, int, int, GemmContext&,        \
                                        cudaStream_t);                                                        \
  template CudaStatus matmul_backward<T, G>(T*, G*, G*, const T*, const T*, const T*, int, int, int, GemmContext&, \
                                            cudaStream_t);
MT_INSTANTIATE(float, float)
MT_INSTANTIATE(__nv_bfloat16, float)
#undef MT_INSTANTIATE

}  // namespace mt::cuda

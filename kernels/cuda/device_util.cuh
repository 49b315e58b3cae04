// Device-side helpers shared by the .cu files (not part of the kernel API): fp32/bf16
// load-store, deterministic warp and block reductions, launch-size helpers.
#pragma once
#include <algorithm>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace mt::cuda::detail {

__device__ __forceinline__ float ld(float x) { return x; }
__device__ __forceinline__ float ld(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T st(float x);
template <>
__device__ __forceinline__ float st<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 st<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Butterfly sums: every lane ends with the same value, in a fixed order (deterministic).
template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide reduction (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
// `shared` holds 32 values. Fixed order: results are bit-reproducible.
template <typename A, typename Op>
__device__ A block_reduce(A v, A* shared, Op op, A identity) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : identity;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

struct Sum {
  template <typename A>
  __device__ A operator()(A a, A b) const { return a + b; }
};
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

inline unsigned blocks_for(size_t n, unsigned threads, size_t cap = 65535u * 16u) {
  size_t b = (n + threads - 1) / threads;
  if (b > cap) b = cap;
  return unsigned(b == 0 ? 1 : b);
}

// Row-wise elementwise kernels over N rows of `cols` columns: grid.x covers the columns (with
// `threads` per block), grid.y the rows, each stepping by the grid past the launch limits, so
// no element pays for a 64-bit division and mod to find its row (the flat grid-stride loop did).
inline dim3 rows_grid(int N, int cols, unsigned threads) {
  const unsigned x = unsigned(std::min<size_t>((size_t(cols) + threads - 1) / threads, 1024));
  const unsigned y = unsigned(std::min(N, 65535));
  return dim3(x == 0 ? 1 : x, y == 0 ? 1 : y);
}
#define MT_FOR_ROWS(n, N) for (int n = int(blockIdx.y); n < (N); n += int(gridDim.y))
#define MT_FOR_COLS(c, C) for (int c = int(blockIdx.x * blockDim.x + threadIdx.x); c < (C); c += int(gridDim.x * blockDim.x))

}  // namespace mt::cuda::detail

// Internal to attention_mma_fwd.cu / attention_mma_bwd.cu: the tensor-core flash attention for
// bf16 storage and head_dim 64 or 128 (kernels/attention.h contract; attention.cuh selects it).
// Tensor cores through WMMA (bf16 16x16x16 fragments, fp32 accumulate). The accumulator
// fragment's element layout is opaque, so scores are staged through shared memory for the
// softmax / masking, and the one per-row operation done in registers (the forward's rescaling of
// O) learns each element's row from a probe fragment loaded from a matrix of row indices.
// Tiles: 64 query rows x 64 keys, 4 warps; each warp owns 16 rows (forward, dQ) or 16 keys (dK/dV).
#pragma once
#include <cuda_bf16.h>
#include <mma.h>

#include <climits>
#include <cstdint>
#include <initializer_list>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attention_tiles.h"
#include "kernels/cuda/status.cuh"

namespace mt::cuda::attn {

using bf16 = __nv_bfloat16;
namespace wmma = nvcuda::wmma;

constexpr int kWarps = kTile / 16;
constexpr int kThreads = 32 * kWarps;
constexpr int kLdP = kTile + 8;  // leading dim of bf16 [64][64] tiles (P, dS): 16-byte pad against bank conflicts
constexpr int kLdS = kTile + 4;  // leading dim of fp32 [64][64] score tiles
constexpr int kLdC = 16 + 4;     // leading dim of a warp's fp32 16 x 16 scratch
template <int D>
constexpr int kLd = D + 8;  // leading dim of bf16 [64][D] tiles (q, k, v, dO)

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBt = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;  // a row-major tile read transposed
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// acc += A[16 x K] . B[16 x K]^T; A and B row-major (B read as column-major: its transpose).
template <int K>
__device__ __forceinline__ void mma_abt(FragC& acc, const bf16* A, int lda, const bf16* B, int ldb) {
#pragma unroll
  for (int k = 0; k < K; k += 16) {
    FragA a;
    FragBt bt;
    wmma::load_matrix_sync(a, A + k, lda);
    wmma::load_matrix_sync(bt, B + k, ldb);
    wmma::mma_sync(acc, a, bt, acc);
  }
}

// acc[f] += A[16 x 64] . B[64 x 16 f .. 16 f + 16) for every f < D / 16; A and B row-major.
template <int D>
__device__ __forceinline__ void mma_ab_row(FragC (&acc)[D / 16], const bf16* A, int lda, const bf16* B, int ldb) {
#pragma unroll
  for (int k = 0; k < kTile; k += 16) {
    FragA a;
    wmma::load_matrix_sync(a, A + k, lda);
#pragma unroll
    for (int f = 0; f < D / 16; ++f) {
      FragB bm;
      wmma::load_matrix_sync(bm, B + long(k) * ldb + 16 * f, ldb);
      wmma::mma_sync(acc[f], a, bm, acc[f]);
    }
  }
}

template <int N>
__device__ __forceinline__ void zero(FragC (&acc)[N]) {
#pragma unroll
  for (int f = 0; f < N; ++f) wmma::fill_fragment(acc[f], 0.f);
}

// dst[r][0:D] = row r0 + r of src (row stride src_row elements), zero at or past T. Whole block,
// 16-byte copies (the caller checked that src and src_row keep them aligned).
template <int D>
__device__ void load_tile(bf16* dst, const bf16* src, long src_row, int r0, int T) {
  constexpr int kVecs = D / 8;  // 8 bf16 per 16 bytes
  for (int e = threadIdx.x; e < kTile * kVecs; e += blockDim.x) {
    const int r = e / kVecs, c = (e % kVecs) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r0 + r < T) v = *reinterpret_cast<const uint4*>(src + long(r0 + r) * src_row + c);
    *reinterpret_cast<uint4*>(dst + r * kLd<D> + c) = v;
  }
}

// ranges[i]: the keys query row t0 + i sees (row_range). Whole block.
__device__ inline void load_ranges(Range* ranges, const Geo& g, int b, int t0) {
  for (int i = threadIdx.x; i < kTile; i += blockDim.x)
    ranges[i] = row_range(t0 + i, g.T, t0 + i < g.T ? g.start(b, t0 + i) : 0);
}

// Smallest first key of the tile's rows (after a __syncthreads): keys before it are seen by none.
__device__ inline int min_first(const Range* ranges) {
  int lo = INT_MAX;
  for (int i = 0; i < kTile; ++i) lo = min(lo, ranges[i].first);
  return lo;
}

// Backward per-row state of query rows t0 .. t0 + 63 of head h: lse in log2 units and
// D_t = dO_t . O_t (fp32 from the stored bf16). Whole block; two lanes per row, fixed order.
template <int D>
__device__ void load_row_stats(float* lse2, float* di, const bf16* out, const bf16* dout, const float* lse,
                               const Geo& g, int b, int h, int t0) {
  const int lane = threadIdx.x & 31, i = 16 * (threadIdx.x >> 5) + (lane >> 1), t = t0 + i;
  float acc = 0.f;
  if (t < g.T) {
    const long o = (long(b) * g.T + t) * g.orow() + long(h) * D + (lane & 1) * (D / 2);
    for (int d = 0; d < D / 2; ++d) acc += __bfloat162float(dout[o + d]) * __bfloat162float(out[o + d]);
  }
  acc += __shfl_xor_sync(0xffffffffu, acc, 1);
  if ((lane & 1) == 0) {
    di[i] = acc;
    lse2[i] = t < g.T ? lse[(long(b) * g.H + h) * g.T + t] * kLog2e : 0.f;
  }
}

// Writes a warp's 16 x 16 fp32 fragment as bf16 rows dst + r * stride (r < rows), each row
// times row_scale[r] when given; `scratch` is the warp's own 16 x ld floats.
__device__ inline void store_frag(const FragC& acc, float* scratch, int ld, bf16* dst, long stride, int rows,
                                  const float* row_scale) {
  wmma::store_matrix_sync(scratch, acc, ld, wmma::mem_row_major);
  __syncwarp();
  const int lane = threadIdx.x & 31, r = lane >> 1, c = (lane & 1) * 8;
  if (r < rows) {
    const float s = row_scale ? row_scale[r] : 1.f;
    __align__(16) bf16 v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = __float2bfloat16_rn(scratch[r * ld + c + j] * s);
    *reinterpret_cast<uint4*>(dst + r * stride + c) = *reinterpret_cast<const uint4*>(v);
  }
  __syncwarp();
}

// Launchers (attention_mma_fwd.cu / attention_mma_bwd.cu); g.D is 64 or 128 (mma_supports).
CudaStatus mma_forward(bf16* out, float* lse, const bf16* qkv, const Geo& g, cudaStream_t stream);
CudaStatus mma_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
                        const Geo& g, cudaStream_t stream);

// Whether the tensor-core kernels take this call: attention_kernel() is kTensorCore, D is 64 or
// 128, and every bf16 tensor is 16-byte aligned (the tile loads are 16-byte vectors).
bool mma_supports(const Geo& g, std::initializer_list<const void*> tensors);

}  // namespace mt::cuda::attn

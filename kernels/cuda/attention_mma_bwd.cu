// Tensor-core attention backward (attention_mma.cuh). P is recomputed from lse and
// D_t = dO_t . O_t per row inside the kernels; dS = P (dP - D_t) scale. Deterministic, no atomics:
//  * dQ: a block per (64-query tile, head, sequence) loops over its key tiles in order;
//    dQ += dS K, accumulated in fp32 fragments.
//  * dK / dV: a block per (64-key tile, kv head, sequence) loops over the group's query heads
//    and query tiles in order, skipping tiles no row of which sees its keys; each warp owns 16
//    keys: dV += P^T dO, dK += dS^T Q.
// S and dP come from WMMA in fp32 16 x 16 chunks staged through the warp's scratch; P and dS are
// rounded to bf16 only as tensor-core operands; outputs are rounded once.
#include <cuda_bf16.h>

#include <cmath>

#include "kernels/cuda/attention_mma.cuh"

namespace mt::cuda::attn {
namespace {

// Per query row of the current tile: lse (log2 units), D_t, and the keys it sees.
struct RowState {
  float lse2[kTile], di[kTile];
  Range ranges[kTile];
};

// P and dS of query row i of the tile against `key`, from its raw score s = q . k and dp = dO . v.
__device__ __forceinline__ void p_ds(const RowState& rows, int i, int key, float s, float dp, float sl2, float scale,
                                     float& p, float& ds) {
  p = sees(rows.ranges[i], key) ? exp2f(s * sl2 - rows.lse2[i]) : 0.f;
  ds = p * (dp - rows.di[i]) * scale;
}

// Stages a warp's 16 x 16 chunks S and dP in its scratch (s_c, dp_c; ld kLdC) for p_ds.
template <int D>
__device__ void scores_chunk(float* s_c, float* dp_c, const bf16* a_s, const bf16* b_s, const bf16* a_dp,
                             const bf16* b_dp) {
  FragC s, dp;
  wmma::fill_fragment(s, 0.f);
  wmma::fill_fragment(dp, 0.f);
  mma_abt<D>(s, a_s, kLd<D>, b_s, kLd<D>);
  mma_abt<D>(dp, a_dp, kLd<D>, b_dp, kLd<D>);
  wmma::store_matrix_sync(s_c, s, kLdC, wmma::mem_row_major);
  wmma::store_matrix_sync(dp_c, dp, kLdC, wmma::mem_row_major);
  __syncwarp();
}

template <int D>
struct DqSmem {
  alignas(32) bf16 q[kTile][kLd<D>];
  alignas(32) bf16 dout[kTile][kLd<D>];
  alignas(32) bf16 k[kTile][kLd<D>];
  alignas(32) bf16 v[kTile][kLd<D>];
  alignas(32) bf16 ds[kTile][kLdP];  // dS of the current key tile, rows owned by warps
  alignas(32) float scratch[kWarps][2][16][kLdC];
  RowState rows;
};
// 90,112 bytes at D = 128 (57,344 at 64): two blocks per SM.
static_assert(sizeof(DqSmem<128>) <= 113 * 1024, "dQ shared memory: two blocks per SM");

template <int D>
__global__ void __launch_bounds__(kThreads) attention_mma_backward_dq_kernel(bf16* dqkv, const bf16* dout,
                                                                            const bf16* qkv, const bf16* out,
                                                                            const float* lse, Geo g) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  DqSmem<D>& sm = *reinterpret_cast<DqSmem<D>*>(smem_raw);
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int b = blockIdx.z, h = blockIdx.y, q0 = (gridDim.x - 1 - blockIdx.x) * kTile, kvh = h / (g.H / g.KVH);
  const bf16* base = qkv + long(b) * g.T * g.row();
  const float sl2 = g.scale * kLog2e;
  load_tile<D>(&sm.q[0][0], base + g.q_off(h), g.row(), q0, g.T);
  load_tile<D>(&sm.dout[0][0], dout + long(b) * g.T * g.orow() + long(h) * D, g.orow(), q0, g.T);
  load_ranges(sm.rows.ranges, g, b, q0);
  load_row_stats<D>(sm.rows.lse2, sm.rows.di, out, dout, lse, g, b, h, q0);
  __syncthreads();
  float* s_c = &sm.scratch[w][0][0][0];
  float* dp_c = &sm.scratch[w][1][0][0];
  const int r = lane >> 1, c = (lane & 1) * 8, i = 16 * w + r;  // this lane's row and 8 columns of a chunk
  FragC dq[D / 16];
  zero(dq);
  const int k_end = key_tile_end(q0, g.T);
  for (int k0 = key_tile_begin(min_first(sm.rows.ranges)); k0 < k_end; k0 += kTile) {
    __syncthreads();  // the previous tile's K / V are no longer read
    load_tile<D>(&sm.k[0][0], base + g.k_off(kvh), g.row(), k0, g.T);
    load_tile<D>(&sm.v[0][0], base + g.v_off(kvh), g.row(), k0, g.T);
    __syncthreads();
    for (int n = 0; n < kTile / 16; ++n) {
      scores_chunk<D>(s_c, dp_c, &sm.q[16 * w][0], &sm.k[16 * n][0], &sm.dout[16 * w][0], &sm.v[16 * n][0]);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        float p, ds;
        p_ds(sm.rows, i, k0 + 16 * n + c + j, s_c[r * kLdC + c + j], dp_c[r * kLdC + c + j], sl2, g.scale, p, ds);
        sm.ds[i][16 * n + c + j] = __float2bfloat16_rn(ds);
      }
      __syncwarp();
    }
    mma_ab_row<D>(dq, &sm.ds[16 * w][0], kLdP, &sm.k[0][0], kLd<D>);
  }
  const int t_w = q0 + 16 * w;
  bf16* dst = dqkv + (long(b) * g.T + t_w) * g.row() + g.q_off(h);
#pragma unroll
  for (int f = 0; f < D / 16; ++f) store_frag(dq[f], s_c, kLdC, dst + 16 * f, g.row(), g.T - t_w, nullptr);
}

template <int D>
struct DkvSmem {
  alignas(32) bf16 k[kTile][kLd<D>];
  alignas(32) bf16 v[kTile][kLd<D>];
  alignas(32) bf16 q[kTile][kLd<D>];
  alignas(32) bf16 dout[kTile][kLd<D>];
  alignas(32) bf16 p_t[kTile][kLdP];   // P^T of the current query tile: [key][query], rows owned by warps
  alignas(32) bf16 ds_t[kTile][kLdP];  // dS^T likewise
  alignas(32) float scratch[kWarps][2][16][kLdC];
  RowState rows;
};
// 99,328 bytes at D = 128 (66,560 at 64): two blocks per SM.
static_assert(sizeof(DkvSmem<128>) <= 113 * 1024, "dK/dV shared memory: two blocks per SM");

// dV += P^T dO and dK += dS^T Q of query tile t0 of head h, for the warp's 16 keys.
template <int D>
__device__ void dkv_query_tile(DkvSmem<D>& sm, FragC (&dk)[D / 16], FragC (&dv)[D / 16], int k0, float sl2,
                               float scale) {
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* s_c = &sm.scratch[w][0][0][0];
  float* dp_c = &sm.scratch[w][1][0][0];
  const int r = lane >> 1, c = (lane & 1) * 8, key = k0 + 16 * w + r;  // this lane's key and 8 queries of a chunk
  for (int n = 0; n < kTile / 16; ++n) {
    scores_chunk<D>(s_c, dp_c, &sm.k[16 * w][0], &sm.q[16 * n][0], &sm.v[16 * w][0], &sm.dout[16 * n][0]);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int i = 16 * n + c + j;
      float p, ds;
      p_ds(sm.rows, i, key, s_c[r * kLdC + c + j], dp_c[r * kLdC + c + j], sl2, scale, p, ds);
      sm.p_t[16 * w + r][i] = __float2bfloat16_rn(p);
      sm.ds_t[16 * w + r][i] = __float2bfloat16_rn(ds);
    }
    __syncwarp();
  }
  mma_ab_row<D>(dv, &sm.p_t[16 * w][0], kLdP, &sm.dout[0][0], kLd<D>);
  mma_ab_row<D>(dk, &sm.ds_t[16 * w][0], kLdP, &sm.q[0][0], kLd<D>);
}

template <int D>
__global__ void __launch_bounds__(kThreads) attention_mma_backward_dkv_kernel(bf16* dqkv, const bf16* dout,
                                                                             const bf16* qkv, const bf16* out,
                                                                             const float* lse, Geo g) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  DkvSmem<D>& sm = *reinterpret_cast<DkvSmem<D>*>(smem_raw);
  const int w = threadIdx.x >> 5;
  const int b = blockIdx.z, kvh = blockIdx.y, k0 = blockIdx.x * kTile, group = g.H / g.KVH;
  const bf16* base = qkv + long(b) * g.T * g.row();
  const bf16* dout_b = dout + long(b) * g.T * g.orow();
  load_tile<D>(&sm.k[0][0], base + g.k_off(kvh), g.row(), k0, g.T);
  load_tile<D>(&sm.v[0][0], base + g.v_off(kvh), g.row(), k0, g.T);
  FragC dk[D / 16], dv[D / 16];
  zero(dk);
  zero(dv);
  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
    // queries before k0 see none of these keys (causal), nor those past the window's reach
    for (int t0 = k0, t_end = attn::query_rows_end(k0, kTile, g.T, g.window); t0 < t_end; t0 += kTile) {
      __syncthreads();  // the previous query tile's operands and row state are no longer read
      load_ranges(sm.rows.ranges, g, b, t0);
      __syncthreads();
      if (query_tile_skipped(min_first(sm.rows.ranges), k0)) continue;  // block-uniform
      load_row_stats<D>(sm.rows.lse2, sm.rows.di, out, dout, lse, g, b, h, t0);
      load_tile<D>(&sm.q[0][0], base + g.q_off(h), g.row(), t0, g.T);
      load_tile<D>(&sm.dout[0][0], dout_b + long(h) * D, g.orow(), t0, g.T);
      __syncthreads();
      dkv_query_tile<D>(sm, dk, dv, k0, g.scale * kLog2e, g.scale);
    }
  }
  const int key_w = k0 + 16 * w;
  bf16* dst = dqkv + (long(b) * g.T + key_w) * g.row();
  float* scratch = &sm.scratch[w][0][0][0];
#pragma unroll
  for (int f = 0; f < D / 16; ++f) {
    store_frag(dk[f], scratch, kLdC, dst + g.k_off(kvh) + 16 * f, g.row(), g.T - key_w, nullptr);
    store_frag(dv[f], scratch, kLdC, dst + g.v_off(kvh) + 16 * f, g.row(), g.T - key_w, nullptr);
  }
}

template <int D>
CudaStatus launch_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
                           const Geo& g, cudaStream_t stream) {
  const size_t s_dq = sizeof(DqSmem<D>), s_dkv = sizeof(DkvSmem<D>);
  MT_CUDA_CALL(cudaFuncSetAttribute(attention_mma_backward_dq_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(s_dq)));
  MT_CUDA_CALL(cudaFuncSetAttribute(attention_mma_backward_dkv_kernel<D>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, int(s_dkv)));
  const int tiles = (g.T + kTile - 1) / kTile;
  clear_last_error();
  attention_mma_backward_dq_kernel<D>
      <<<dim3(tiles, g.H, g.B), kThreads, s_dq, stream>>>(dqkv, dout, qkv, out, lse, g);
  MT_CUDA_TRY(launched("attention_mma_backward_dq_kernel"));
  clear_last_error();
  attention_mma_backward_dkv_kernel<D>
      <<<dim3(tiles, g.KVH, g.B), kThreads, s_dkv, stream>>>(dqkv, dout, qkv, out, lse, g);
  return launched("attention_mma_backward_dkv_kernel");
}

}  // namespace

CudaStatus mma_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out, const float* lse,
                        const Geo& g, cudaStream_t stream) {
  return g.D == 64 ? launch_backward<64>(dqkv, dout, qkv, out, lse, g, stream)
                   : launch_backward<128>(dqkv, dout, qkv, out, lse, g, stream);
}

}  // namespace mt::cuda::attn

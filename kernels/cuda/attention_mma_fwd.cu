// Tensor-core attention forward (attention_mma.cuh), FlashAttention-2 style: a block per
// (64-query tile, head, sequence), longest causal rows first; K/V tiles of 64 keys from the
// tile's first document start to its diagonal. Per tile each warp computes its 16 x 64 scores
// S = Q K^T (WMMA, fp32) into shared memory, masks them (causal + document, per element),
// updates the running max m and sum l in fp32 (log2 units), writes P = exp2(S - m) as bf16,
// rescales its O fragments (in registers) by exp2(m_old - m_new) and adds P V. At the end
// O / l is stored once as bf16 and lse = ln(sum exp(scores)) in fp32.
#include <cuda_bf16.h>

#include <cmath>

#include "kernels/cuda/attention_mma.cuh"

namespace mt::cuda::attn {
namespace {

template <int D>
struct FwdSmem {
  alignas(32) bf16 q[kTile][kLd<D>];
  alignas(32) bf16 k[kTile][kLd<D>];
  alignas(32) bf16 v[kTile][kLd<D>];
  alignas(32) float s[kTile][kLdS];  // scores of the current key tile; each warp owns 16 rows
  alignas(32) bf16 p[kTile][kLdP];   // probabilities of the current key tile (bf16 operand of P V)
  float row_factor[kTile];           // per-row rescale (exp2(m_old - m_new)), then 1 / l
  Range ranges[kTile];               // keys each row sees
};
// 79,616 bytes at D = 128 (55,040 at 64): two blocks per SM.
static_assert(sizeof(FwdSmem<128>) <= 113 * 1024, "forward shared memory: two blocks per SM");

// row_of[e]: the row (0..15) of accumulator element e, read from a probe fragment loaded from a
// matrix whose entry (r, c) is r. `scratch` is the warp's 16 x ld floats.
__device__ void accumulator_rows(int (&row_of)[FragC::num_elements], float* scratch, int ld) {
  for (int e = threadIdx.x & 31; e < 256; e += 32) scratch[(e / 16) * ld + e % 16] = float(e / 16);
  __syncwarp();
  FragC probe;
  wmma::load_matrix_sync(probe, scratch, ld, wmma::mem_row_major);
#pragma unroll
  for (int e = 0; e < FragC::num_elements; ++e) row_of[e] = int(probe.x[e]);
  __syncwarp();
}

// Masks the warp's scores of key tile k0 (row i = 16 w + lane / 2, half the columns per lane),
// updates m / l and writes P (bf16) and the row's rescale factor. Log2 units: scores * scale * log2 e.
__device__ void online_softmax(float* srow, bf16* prow, Range range, int key0, float sl2, float& m, float& l,
                               float& factor) {
  float mx = -INFINITY;
#pragma unroll 8
  for (int j = 0; j < 32; ++j) {
    const float x = sees(range, key0 + j) ? srow[j] * sl2 : -INFINITY;
    srow[j] = x;
    mx = fmaxf(mx, x);
  }
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  const float m_new = fmaxf(m, mx);
  const float m_use = m_new == -INFINITY ? 0.f : m_new;  // a row that has seen no key yet: P = 0
  float sum = 0.f;
#pragma unroll 8
  for (int j = 0; j < 32; ++j) {
    const float p = exp2f(srow[j] - m_use);  // masked: exp2(-inf) = 0
    sum += p;
    prow[j] = __float2bfloat16_rn(p);
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  factor = exp2f(m - m_use);  // m = -inf (first visible tile): 0
  l = l * factor + sum;
  m = m_new;
}

template <int D>
__global__ void __launch_bounds__(kThreads) attention_mma_forward_kernel(bf16* out, float* lse, const bf16* qkv, Geo g) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  FwdSmem<D>& sm = *reinterpret_cast<FwdSmem<D>*>(smem_raw);
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int b = blockIdx.z, h = blockIdx.y, q0 = (gridDim.x - 1 - blockIdx.x) * kTile, kvh = h / (g.H / g.KVH);
  const bf16* base = qkv + long(b) * g.T * g.row();
  const float sl2 = g.scale * kLog2e;
  float* strip = &sm.s[16 * w][0];
  int row_of[FragC::num_elements];
  accumulator_rows(row_of, strip, kLdS);
  load_tile<D>(&sm.q[0][0], base + g.q_off(h), g.row(), q0, g.T);
  load_ranges(sm.ranges, g, b, q0);
  __syncthreads();
  FragA qf[D / 16];  // this warp's 16 query rows, kept in registers for every key tile
#pragma unroll
  for (int k = 0; k < D / 16; ++k) wmma::load_matrix_sync(qf[k], &sm.q[16 * w][16 * k], kLd<D>);
  FragC o[D / 16];
  zero(o);
  const int i = 16 * w + (lane >> 1), c0 = (lane & 1) * 32;  // this lane's row and half of the key tile
  const Range range = sm.ranges[i];
  float m = -INFINITY, l = 0.f;
  const int k_end = key_tile_end(q0, g.T);
  for (int k0 = key_tile_begin(min_first(sm.ranges)); k0 < k_end; k0 += kTile) {
    __syncthreads();  // the previous tile's K / V are no longer read
    load_tile<D>(&sm.k[0][0], base + g.k_off(kvh), g.row(), k0, g.T);
    load_tile<D>(&sm.v[0][0], base + g.v_off(kvh), g.row(), k0, g.T);
    __syncthreads();
#pragma unroll
    for (int n = 0; n < kTile / 16; ++n) {
      FragC s;
      wmma::fill_fragment(s, 0.f);
#pragma unroll
      for (int k = 0; k < D / 16; ++k) {
        FragBt kt;
        wmma::load_matrix_sync(kt, &sm.k[16 * n][16 * k], kLd<D>);
        wmma::mma_sync(s, qf[k], kt, s);
      }
      wmma::store_matrix_sync(strip + 16 * n, s, kLdS, wmma::mem_row_major);
    }
    __syncwarp();
    float factor;
    online_softmax(&sm.s[i][c0], &sm.p[i][c0], range, k0 + c0, sl2, m, l, factor);
    if ((lane & 1) == 0) sm.row_factor[i] = factor;
    __syncwarp();
#pragma unroll
    for (int f = 0; f < D / 16; ++f)
#pragma unroll
      for (int e = 0; e < FragC::num_elements; ++e) o[f].x[e] *= sm.row_factor[16 * w + row_of[e]];
    mma_ab_row<D>(o, &sm.p[16 * w][0], kLdP, &sm.v[0][0], kLd<D>);
  }
  const int t = q0 + i;
  __syncwarp();  // every lane has read the last tile's row_factor
  if ((lane & 1) == 0) {
    sm.row_factor[i] = l > 0.f ? 1.f / l : 0.f;
    if (t < g.T) lse[(long(b) * g.H + h) * g.T + t] = (m + log2f(l)) / kLog2e;
  }
  __syncwarp();
  const int t_w = q0 + 16 * w;
  bf16* dst = out + (long(b) * g.T + t_w) * g.orow() + long(h) * D;
#pragma unroll
  for (int f = 0; f < D / 16; ++f)
    store_frag(o[f], strip, kLdS, dst + 16 * f, g.orow(), g.T - t_w, &sm.row_factor[16 * w]);
}

template <int D>
CudaStatus launch_forward(bf16* out, float* lse, const bf16* qkv, const Geo& g, cudaStream_t stream) {
  const size_t smem = sizeof(FwdSmem<D>);
  MT_CUDA_CALL(cudaFuncSetAttribute(attention_mma_forward_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(smem)));
  const dim3 grid((g.T + kTile - 1) / kTile, g.H, g.B);
  clear_last_error();
  attention_mma_forward_kernel<D><<<grid, kThreads, smem, stream>>>(out, lse, qkv, g);
  return launched("attention_mma_forward_kernel");
}

}  // namespace

CudaStatus mma_forward(bf16* out, float* lse, const bf16* qkv, const Geo& g, cudaStream_t stream) {
  return g.D == 64 ? launch_forward<64>(out, lse, qkv, g, stream) : launch_forward<128>(out, lse, qkv, g, stream);
}

}  // namespace mt::cuda::attn

#include <cuda_bf16.h>

#include <cmath>
#include <type_traits>

#include "kernels/cuda/attention.cuh"
#include "kernels/attention.h"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attention_mma.cuh"

namespace mt::cuda {

namespace {

using attn::Geo;
using attn::kKeys;
constexpr int kRows = 16;  // query rows (warps) per block

// Shared memory: q [kRows][D], k [kKeys][D+1] (padded: lane j reads row j), v [kKeys][32*kDL].
template <int kDL>
size_t fwd_smem(int D) {
  return sizeof(float) * (size_t(kRows) * D + size_t(kKeys) * (D + 1) + size_t(kKeys) * 32 * kDL);
}

template <typename T, int kDL>
__global__ void __launch_bounds__(32 * kRows) attention_forward_kernel(T* out, float* lse, const T* qkv, Geo g) {
  extern __shared__ float smem[];
  const int D = g.D, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kRows, t = q0 + w;
  const int kvh = h / (g.H / g.KVH), Dv = 32 * kDL;
  float* q_s = smem;
  float* k_s = q_s + kRows * D;
  float* v_s = k_s + kKeys * (D + 1);
  const T* base = qkv + long(b) * g.T * g.row();
  const bool valid = t < g.T;
  attn::load_row(q_s + w * D, base + long(t) * g.row() + g.q_off(h), D, valid);
  float m = -INFINITY, l = 0.f, o[kDL];
#pragma unroll
  for (int i = 0; i < kDL; ++i) o[i] = 0.f;
  const int k_end = min(g.T, q0 + kRows);
  const int k_begin = g.min_start(b, q0, kRows) / kKeys * kKeys, first = valid ? g.start(b, t) : 0;
  for (int k0 = k_begin; k0 < k_end; k0 += kKeys) {
    __syncthreads();
    attn::load_tile(k_s, D + 1, base + g.k_off(kvh), g.row(), k0, g.T, D);
    attn::load_tile(v_s, Dv, base + g.v_off(kvh), g.row(), k0, g.T, D);
    __syncthreads();
    if (!valid || k0 > t || k0 + kKeys <= first) continue;  // causal / another document: warp-uniform
    const bool vis = k0 + lane <= t && k0 + lane >= first;
    const float s = vis ? g.score(attn::dot_row(q_s + w * D, k_s + lane * (D + 1), D)) : -INFINITY;
    const float m_new = fmaxf(m, detail::warp_max(s));
    const float p = vis ? expf(s - m_new) : 0.f;
    const float alpha = expf(m - m_new);  // m = -inf on the first tile: alpha = 0
    l = l * alpha + detail::warp_sum(p);
#pragma unroll
    for (int i = 0; i < kDL; ++i) o[i] *= alpha;
    for (int j = 0; j < kKeys; ++j) {
      const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
      for (int i = 0; i < kDL; ++i) o[i] += pj * v_s[j * Dv + lane + 32 * i];
    }
    m = m_new;
  }
  if (!valid) return;
  T* dst = out + (long(b) * g.T + t) * g.orow() + long(h) * D;
  const float inv = 1.f / l;
#pragma unroll
  for (int i = 0; i < kDL; ++i)
    if (lane + 32 * i < D) dst[lane + 32 * i] = detail::st<T>(o[i] * inv);
  if (lane == 0) lse[(long(b) * g.H + h) * g.T + t] = m + logf(l);
}

template <typename T, int kDL>
CudaStatus launch_forward(T* out, float* lse, const T* qkv, const Geo& g, cudaStream_t stream) {
  const size_t smem = fwd_smem<kDL>(g.D);
  // the instantiation's largest head_dim, not this call's: a launch with a wider head from
  // another thread never finds the limit lowered under it
  MT_CUDA_CALL(cudaFuncSetAttribute(attention_forward_kernel<T, kDL>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(fwd_smem<kDL>(32 * kDL))));
  const dim3 grid((g.T + kRows - 1) / kRows, g.H, g.B);
  clear_last_error();
  attention_forward_kernel<T, kDL><<<grid, 32 * kRows, smem, stream>>>(out, lse, qkv, g);
  return launched("attention_forward_kernel");
}

}  // namespace

template <typename T>
CudaStatus attention_forward(T* out, float* lse, const T* qkv, const int32_t* pos, int B, int T_, int H, int KVH,
                             int D, cudaStream_t stream, AttentionOptions opt) {
  if (B <= 0 || T_ <= 0) return {};
  if (D <= 0 || D > cpu::kCudaAttentionMaxHeadDim || KVH <= 0 || H % KVH) return invalid_value("attention_forward: bad head geometry");
  const Geo g{B, T_, H, KVH, D, float(opt.scale > 0 ? opt.scale : 1.0 / std::sqrt(double(D))), pos, opt.window,
              float(opt.softcap)};
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    if (attn::mma_supports(g, {out, qkv})) return attn::mma_forward(out, lse, qkv, g, stream);
  if (D <= 32) return launch_forward<T, 1>(out, lse, qkv, g, stream);
  if (D <= 64) return launch_forward<T, 2>(out, lse, qkv, g, stream);
  if (D <= 128) return launch_forward<T, 4>(out, lse, qkv, g, stream);
  return launch_forward<T, 8>(out, lse, qkv, g, stream);
}

#define MT_INSTANTIATE(T) \
  template CudaStatus attention_forward<T>(T*, float*, const T*, const int32_t*, int, int, int, int, int, cudaStream_t, AttentionOptions);
MT_INSTANTIATE(float)
MT_INSTANTIATE(__nv_bfloat16)
#undef MT_INSTANTIATE

}  // namespace mt::cuda

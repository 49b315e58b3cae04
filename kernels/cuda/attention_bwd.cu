// Attention backward: P is recomputed from lse; D_t = dO_t . O_t is recomputed per row.
// dK/dV: block per (key tile, kv head, sequence), rows of its query heads in fixed order;
// dQ: block of query rows per (tile, head, sequence). No atomics: bit-reproducible.
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
constexpr int kRows = 8;  // query rows (warps) per block in both kernels

// Per-warp row state shared by both kernels: q and dO rows in shared memory, D_t and lse.
template <typename T>
__device__ void load_query(const T* qkv, const T* dout, const T* out, const float* lse, const Geo& g, int b, int h,
                           int t, float* q_w, float* do_w, float& di, float& l) {
  const bool valid = t < g.T;
  const long tok = long(b) * g.T + t;
  attn::load_row(q_w, qkv + tok * g.row() + g.q_off(h), g.D, valid);
  attn::load_row(do_w, dout + tok * g.orow() + long(h) * g.D, g.D, valid);
  float acc = 0.f;
  if (valid)
    for (int d = threadIdx.x & 31; d < g.D; d += 32)
      acc += detail::ld(dout[tok * g.orow() + long(h) * g.D + d]) * detail::ld(out[tok * g.orow() + long(h) * g.D + d]);
  di = detail::warp_sum(acc);
  l = valid ? lse[(long(b) * g.H + h) * g.T + t] : 0.f;
  __syncwarp();
}

// Lane j's probability and score gradient for key k0 + j against query row t.
__device__ __forceinline__ void p_ds(const float* q_w, const float* do_w, const float* k_s, const float* v_s,
                                     const Geo& g, int b, int t, int k0, float di, float l, float& p, float& ds) {
  const int j = threadIdx.x & 31, key = k0 + j;
  p = ds = 0.f;
  if (t >= g.T || key > t || key < g.start(b, t)) return;
  const float s = g.score(attn::dot_row(q_w, k_s + j * (g.D + 1), g.D));
  p = expf(s - l);
  const float dp = attn::dot_row(do_w, v_s + j * (g.D + 1), g.D);
  ds = p * (dp - di) * g.scale * g.score_slope(s);
}

template <int kDL>
size_t dq_smem(int D) {
  return sizeof(float) * (2 * size_t(kRows) * D + 2 * size_t(kKeys) * (D + 1));
}

template <typename T, int kDL>
__global__ void __launch_bounds__(32 * kRows)
    attention_backward_dq_kernel(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse, Geo g) {
  extern __shared__ float smem[];
  const int D = g.D, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * kRows, t = q0 + w;
  const int kvh = h / (g.H / g.KVH);
  float* q_w = smem + w * D;
  float* do_w = smem + kRows * D + w * D;
  float* k_s = smem + 2 * kRows * D;
  float* v_s = k_s + kKeys * (D + 1);
  float di, l;
  load_query(qkv, dout, out, lse, g, b, h, t, q_w, do_w, di, l);
  const T* base = qkv + long(b) * g.T * g.row();
  float dq[kDL];
#pragma unroll
  for (int i = 0; i < kDL; ++i) dq[i] = 0.f;
  for (int k0 = g.min_start(b, q0, kRows) / kKeys * kKeys; k0 < min(g.T, q0 + kRows); k0 += kKeys) {
    __syncthreads();
    attn::load_tile(k_s, D + 1, base + g.k_off(kvh), g.row(), k0, g.T, D);
    attn::load_tile(v_s, D + 1, base + g.v_off(kvh), g.row(), k0, g.T, D);
    __syncthreads();
    float p, ds;
    p_ds(q_w, do_w, k_s, v_s, g, b, t, k0, di, l, p, ds);
    for (int j = 0; j < kKeys; ++j) {
      const float dsj = __shfl_sync(0xffffffffu, ds, j);
#pragma unroll
      for (int i = 0; i < kDL; ++i) {
        const int d = lane + 32 * i;
        if (d < D) dq[i] += dsj * k_s[j * (D + 1) + d];
      }
    }
  }
  if (t >= g.T) return;
  T* dst = dqkv + (long(b) * g.T + t) * g.row() + g.q_off(h);
#pragma unroll
  for (int i = 0; i < kDL; ++i)
    if (lane + 32 * i < D) dst[lane + 32 * i] = detail::st<T>(dq[i]);
}

template <int kDL>
size_t dkv_smem(int D) {
  return sizeof(float) * (2 * size_t(kKeys) * (D + 1) + 2 * size_t(kRows) * D + 2 * size_t(kRows) * kKeys);
}

template <typename T, int kDL>
__global__ void __launch_bounds__(32 * kRows)
    attention_backward_dkv_kernel(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse, Geo g) {
  constexpr int kElems = kKeys * 32 * kDL / (32 * kRows);  // accumulator elements per thread
  constexpr int kJStep = 32 * kRows / (32 * kDL);          // keys between a thread's accumulators
  static_assert(kJStep * 32 * kDL == 32 * kRows, "a thread's accumulators share one column");
  const int d_own = threadIdx.x % (32 * kDL), j_own = threadIdx.x / (32 * kDL);
  extern __shared__ float smem[];
  const int D = g.D, Dv = 32 * kDL, w = threadIdx.x >> 5;
  const int b = blockIdx.z, kvh = blockIdx.y, k0 = blockIdx.x * kKeys, group = g.H / g.KVH;
  float* k_s = smem;
  float* v_s = k_s + kKeys * (D + 1);
  float* q_s = v_s + kKeys * (D + 1);
  float* do_s = q_s + kRows * D;
  float* p_s = do_s + kRows * D;
  float* ds_s = p_s + kRows * kKeys;
  const T* base = qkv + long(b) * g.T * g.row();
  attn::load_tile(k_s, D + 1, base + g.k_off(kvh), g.row(), k0, g.T, D);
  attn::load_tile(v_s, D + 1, base + g.v_off(kvh), g.row(), k0, g.T, D);
  float dk[kElems], dv[kElems];
#pragma unroll
  for (int i = 0; i < kElems; ++i) dk[i] = dv[i] = 0.f;
  __syncthreads();
  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
    // rows past the window's reach start after this key tile (attention_tiles.h)
    for (int t0 = k0, t_end = attn::query_rows_end(k0, kKeys, g.T, g.window); t0 < t_end; t0 += kRows) {
      if (g.min_start(b, t0, kRows) >= k0 + kKeys) continue;  // block-uniform: no row sees these keys
      float di, l, p, ds;
      load_query(qkv, dout, out, lse, g, b, h, t0 + w, q_s + w * D, do_s + w * D, di, l);
      p_ds(q_s + w * D, do_s + w * D, k_s, v_s, g, b, t0 + w, k0, di, l, p, ds);
      p_s[w * kKeys + (threadIdx.x & 31)] = p;
      ds_s[w * kKeys + (threadIdx.x & 31)] = ds;
      __syncthreads();
      // All of this thread's accumulators share column d (32 * kRows is a multiple of Dv): read
      // q / dO at d once per row. Each accumulator still adds rows r = 0, 1, ... in order.
      if (d_own < D)
        for (int r = 0; r < kRows; ++r) {
          const float qd = q_s[r * D + d_own], dod = do_s[r * D + d_own];
#pragma unroll
          for (int i = 0; i < kElems; ++i) {
            const int j = j_own + i * kJStep;
            dv[i] += p_s[r * kKeys + j] * dod;
            dk[i] += ds_s[r * kKeys + j] * qd;
          }
        }
      __syncthreads();
    }
  }
  T* dbase = dqkv + long(b) * g.T * g.row();
#pragma unroll
  for (int i = 0; i < kElems; ++i) {
    const int e = threadIdx.x + i * 32 * kRows, j = e / Dv, d = e % Dv, key = k0 + j;
    if (d >= D || key >= g.T) continue;
    dbase[long(key) * g.row() + g.k_off(kvh) + d] = detail::st<T>(dk[i]);
    dbase[long(key) * g.row() + g.v_off(kvh) + d] = detail::st<T>(dv[i]);
  }
}

template <typename T, int kDL>
CudaStatus launch_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse, const Geo& g,
                           cudaStream_t stream) {
  const size_t s1 = dq_smem<kDL>(g.D), s2 = dkv_smem<kDL>(g.D);
  // the instantiation's largest head_dim, as in the forward
  MT_CUDA_CALL(cudaFuncSetAttribute(attention_backward_dq_kernel<T, kDL>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(dq_smem<kDL>(32 * kDL))));
  MT_CUDA_CALL(cudaFuncSetAttribute(attention_backward_dkv_kernel<T, kDL>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(dkv_smem<kDL>(32 * kDL))));
  clear_last_error();
  attention_backward_dq_kernel<T, kDL>
      <<<dim3((g.T + kRows - 1) / kRows, g.H, g.B), 32 * kRows, s1, stream>>>(dqkv, dout, qkv, out, lse, g);
  MT_CUDA_TRY(launched("attention_backward_dq_kernel"));
  clear_last_error();
  attention_backward_dkv_kernel<T, kDL>
      <<<dim3((g.T + kKeys - 1) / kKeys, g.KVH, g.B), 32 * kRows, s2, stream>>>(dqkv, dout, qkv, out, lse, g);
  return launched("attention_backward_dkv_kernel");
}

}  // namespace

template <typename T>
CudaStatus attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse, const int32_t* pos,
                              int B, int T_, int H, int KVH, int D, cudaStream_t stream, AttentionOptions opt) {
  if (B <= 0 || T_ <= 0) return {};
  if (D <= 0 || D > cpu::kCudaAttentionMaxHeadDim || KVH <= 0 || H % KVH) return invalid_value("attention_backward: bad head geometry");
  const Geo g{B, T_, H, KVH, D, float(opt.scale > 0 ? opt.scale : 1.0 / std::sqrt(double(D))), pos, opt.window,
              float(opt.softcap)};
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    if (attn::mma_supports(g, {dqkv, dout, qkv, out})) return attn::mma_backward(dqkv, dout, qkv, out, lse, g, stream);
  if (D <= 32) return launch_backward<T, 1>(dqkv, dout, qkv, out, lse, g, stream);
  if (D <= 64) return launch_backward<T, 2>(dqkv, dout, qkv, out, lse, g, stream);
  if (D <= 128) return launch_backward<T, 4>(dqkv, dout, qkv, out, lse, g, stream);
  return launch_backward<T, 8>(dqkv, dout, qkv, out, lse, g, stream);
}

#define MT_INSTANTIATE(T)                                                                                       \
  template CudaStatus attention_backward<T>(T*, const T*, const T*, const T*, const float*, const int32_t*, int, int, \
                                            int, int, int, cudaStream_t, AttentionOptions);
MT_INSTANTIATE(float)
MT_INSTANTIATE(__nv_bfloat16)
#undef MT_INSTANTIATE

}  // namespace mt::cuda

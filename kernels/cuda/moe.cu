// Mixture-of-experts routing and permutation on CUDA (kernels/cuda/moe.cuh). The router: a warp
// per token, its E probabilities in shared memory; statistics through fixed token-block partials
// and an ordered second pass (no atomics). The sort: CUB's stable radix sort. Gather, scatter and
// the gate: row-wise elementwise kernels, or a warp per row where a row's dot product is needed.
#include <cuda_bf16.h>

#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/moe.cuh"

namespace mt::cuda {

namespace {

using detail::ld;
using detail::st;

constexpr int kRouteWarps = 4;       // tokens in flight per router block
constexpr int kRouteMinTokens = 32;  // minimum tokens per statistics partial (one block's)
constexpr int kRouteMaxParts = 512;  // at most this many partials (bounds the scratch)
constexpr int kRowWarps = 8;         // rows per block in the warp-per-row kernels
constexpr size_t kSharedLimit = 48 * 1024;

int route_tokens_per_block(int N) {
  const int by_cap = (N + kRouteMaxParts - 1) / kRouteMaxParts;
  return by_cap > kRouteMinTokens ? by_cap : kRouteMinTokens;
}
int route_parts(int N) {
  const int tpb = route_tokens_per_block(N);
  return (N + tpb - 1) / tpb;
}

CudaStatus check_router(const RouterShape& s, const char* op) {
  if (s.E < 1 || s.E > kMoeMaxExperts || s.k < 1 || s.k > s.E) return invalid_value(op);
  return {};
}

// An expert candidate in the top-k search: a total order (numbers above NaN, the larger value,
// then the lower index; any candidate above none), so that every lane of a butterfly reduction
// ends with the same one.
struct Cand {
  int i;    // expert, -1 for none
  float v;  // its key
};
__device__ __forceinline__ bool better(Cand a, Cand b) {
  if (a.i < 0 || b.i < 0) return a.i >= 0 && b.i < 0;
  const bool an = isnan(a.v), bn = isnan(b.v);
  if (an != bn) return bn;
  if (!an && a.v != b.v) return a.v > b.v;
  return a.i < b.i;
}
__device__ __forceinline__ Cand warp_best(Cand c) {
  for (int o = 16; o > 0; o >>= 1) {
    const Cand other{__shfl_xor_sync(0xffffffffu, c.i, o), __shfl_xor_sync(0xffffffffu, c.v, o)};
    if (better(other, c)) c = other;
  }
  return c;
}

// softmax(logits row) into p (this warp's shared row): p[e] = exp(l[e] - max) / sum.
template <typename T>
__device__ void router_softmax(float* p, const T* l, int E, int lane) {
  float m = -INFINITY;
  for (int e = lane; e < E; e += 32) m = fmaxf(m, ld(l[e]));
  m = detail::warp_max(m);
  float sum = 0.f;
  for (int e = lane; e < E; e += 32) {
    const float v = expf(ld(l[e]) - m);
    p[e] = v;
    sum += v;
  }
  sum = detail::warp_sum(sum);
  for (int e = lane; e < E; e += 32) p[e] = p[e] / sum;
  __syncwarp();
}

// Block b routes tokens [b * tpb, (b + 1) * tpb), warp w of them the w-th, (w + 4)-th, ... in
// order. Shared memory: per warp p[E] (the token's probabilities), psum[E] and cnt[E] (its
// running statistics), chosen[k]. partial (nullptr: no statistics) [blocks, 2E] gets the
// block's counts and probability sums, the warps' sums added in warp order.
template <typename T>
__global__ void moe_route_forward_kernel(int32_t* idx, float* w, float* partial, const T* logits, RouterShape s,
                                         int tpb) {
  extern __shared__ float smem[];
  const int E = s.E, k = s.k, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* p = smem + size_t(warp) * E;
  float* psum = smem + size_t(kRouteWarps + warp) * E;
  float* cnt = smem + size_t(2 * kRouteWarps + warp) * E;
  int* chosen = reinterpret_cast<int*>(smem + size_t(3 * kRouteWarps) * E) + warp * k;
  for (int e = lane; e < E; e += 32) psum[e] = cnt[e] = 0.f;
  __syncwarp();
  const bool by_prob = s.kind == RouterKind::kSoftmaxTopK;
  const int t0 = blockIdx.x * tpb, t1 = min(s.N, t0 + tpb);
  for (int t = t0 + warp; t < t1; t += kRouteWarps) {
    const T* l = logits + size_t(t) * E;
    router_softmax(p, l, E, lane);
    // top k by repeated argmax over the keys (p, or the logits), skipping the chosen.
    for (int j = 0; j < k; ++j) {
      Cand best{-1, 0.f};
      for (int e = lane; e < E; e += 32) {
        bool taken = false;
        for (int i = 0; i < j; ++i) taken = taken || chosen[i] == e;
        const Cand c{e, by_prob ? p[e] : ld(l[e])};
        if (!taken && better(c, best)) best = c;
      }
      best = warp_best(best);
      if (lane == 0) chosen[j] = best.i;
      __syncwarp();
    }
    if (lane == 0) {  // the weights, in the CPU reference's order
      int32_t* id = idx + size_t(t) * k;
      float* wt = w + size_t(t) * k;
      float sum = 0.f;
      if (by_prob) {
        for (int j = 0; j < k; ++j) sum += wt[j] = p[chosen[j]];
        if (s.renormalize)
          for (int j = 0; j < k; ++j) wt[j] /= sum;
      } else {  // softmax over the k chosen logits (the first is their maximum)
        const float top = ld(l[chosen[0]]);
        for (int j = 0; j < k; ++j) sum += wt[j] = expf(ld(l[chosen[j]]) - top);
        for (int j = 0; j < k; ++j) wt[j] /= sum;
      }
      for (int j = 0; j < k; ++j) id[j] = chosen[j];
      if (partial)
        for (int j = 0; j < k; ++j) cnt[chosen[j]] += 1.f;
    }
    if (partial)
      for (int e = lane; e < E; e += 32) psum[e] += p[e];
    __syncwarp();  // p and chosen are rewritten by the next token
  }
  if (!partial) return;
  __syncthreads();
  float* out = partial + size_t(blockIdx.x) * 2 * E;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    float c = 0.f, q = 0.f;
    for (int v = 0; v < kRouteWarps; ++v) {
      c += smem[size_t(2 * kRouteWarps + v) * E + e];
      q += smem[size_t(kRouteWarps + v) * E + e];
    }
    out[e] = c;
    out[E + e] = q;
  }
}

// stats[i] += the blocks' partials[., i], in block order.
__global__ void moe_route_stats_kernel(float* stats, const float* partial, int parts, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float acc = 0.f;
  for (int b = 0; b < parts; ++b) acc += partial[size_t(b) * n + i];
  stats[i] += acc;
}

// Shared memory: per warp p[E], and per chosen slot j its expert and its term: d/dp (softmax
// then top k) or d/dlogit (top k then softmax).
template <typename T>
__global__ void moe_route_backward_kernel(T* dlogits, const float* dw, const T* logits, const int32_t* idx,
                                          const float* w, const float* counts, float aux_scale, RouterShape s) {
  extern __shared__ float smem[];
  const int E = s.E, k = s.k, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int t = blockIdx.x * kRowWarps + warp;
  if (t >= s.N) return;
  float* p = smem + size_t(warp) * E;
  float* term = smem + size_t(kRowWarps) * E + size_t(warp) * k;
  const T* l = logits + size_t(t) * E;
  const int32_t* id = idx + size_t(t) * k;
  router_softmax(p, l, E, lane);
  const bool by_prob = s.kind == RouterKind::kSoftmaxTopK;
  if (lane == 0) {
    const float* wt = w + size_t(t) * k;
    const float* dwt = dw + size_t(t) * k;
    float dot = 0.f;  // sum_j w_j dw_j
    for (int j = 0; j < k; ++j) dot += wt[j] * dwt[j];
    if (by_prob) {  // w_j = p_j (/ S): d/dp_j = dw_j (or (dw_j - w.dw) / S)
      float sum = 0.f;
      for (int j = 0; j < k; ++j) sum += p[id[j]];
      for (int j = 0; j < k; ++j) term[j] = s.renormalize ? (dwt[j] - dot) / sum : dwt[j];
    } else {  // w = softmax(chosen logits): d/dl_j = w_j (dw_j - w.dw)
      for (int j = 0; j < k; ++j) term[j] = wt[j] * (dwt[j] - dot);
    }
  }
  __syncwarp();
  // g = d/dp: the top-k terms, then the load-balancing gradient; dl = the direct d/dlogit terms.
  // In double: the load-balancing part of g (aux_scale * the expert's token count) is large and
  // alike across experts, so g - p.g cancels; in fp32 the error of p.g over E terms reached 1e-4
  // of dlogit (N = 20011, E = 128, k = 4; found under tests/cuda_emu).
  auto g_of = [&](int e) {
    double g = 0;
    if (by_prob)
      for (int j = 0; j < k; ++j)
        if (id[j] == e) g += term[j];
    if (counts) g += double(aux_scale) * counts[e];
    return g;
  };
  double dot = 0;  // p . g
  for (int e = lane; e < E; e += 32) dot += double(p[e]) * g_of(e);
  dot = detail::warp_sum(dot);
  T* d = dlogits + size_t(t) * E;
  for (int e = lane; e < E; e += 32) {
    double dl = 0;
    if (!by_prob)
      for (int j = 0; j < k; ++j)
        if (id[j] == e) dl += term[j];
    dl += double(p[e]) * (g_of(e) - dot);
    d[e] = st<T>(float(dl));
  }
}

__global__ void moe_sort_iota_kernel(int32_t* v, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v[i] = i;
}

// offsets[e] = the first position of the sorted experts holding e or above (e <= E).
__global__ void moe_sort_offsets_kernel(int32_t* offsets, const uint32_t* sorted, int n, int E) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e > E) return;
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (sorted[mid] < uint32_t(e)) lo = mid + 1;
    else hi = mid;
  }
  offsets[e] = lo;
}

int expert_bits(int E) {
  int bits = 1;
  while (bits < 31 && (1 << bits) < E) ++bits;
  return bits;
}

constexpr size_t kAlign = 256;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

template <typename T>
__global__ void moe_gather_kernel(T* out, const T* x, const int32_t* rows, int n, int C, int k) {
  MT_FOR_ROWS(i, n) {
    const T* src = x + size_t(rows[i] / k) * C;
    T* o = out + size_t(i) * C;
    MT_FOR_COLS(c, C) o[c] = src[c];
  }
}

template <typename T>
__global__ void moe_scatter_kernel(T* out, const T* y, const int32_t* rows, const float* w, int n, int C, int k) {
  MT_FOR_ROWS(i, n) {
    const int r = rows[i];
    T* o = out + size_t(r / k) * C;
    const T* yi = y + size_t(i) * C;
    const float wi = w ? w[r] : 1.f;
    MT_FOR_COLS(c, C) o[c] = st<T>(ld(o[c]) + wi * ld(yi[c]));
  }
}

template <typename T>
__global__ void moe_weight_backward_kernel(float* dw, T* dh, T* dy, const T* h, const T* b, const int32_t* rows,
                                           const float* w, int n, int F, int C) {
  const int i = blockIdx.x * kRowWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (i >= n) return;
  const int r = rows[i];
  T* dhi = dh + size_t(i) * F;
  T* dyi = dy + size_t(i) * C;
  const T* hi = h + size_t(i) * F;
  float dot = 0.f;
  for (int f = lane; f < F; f += 32) dot += ld(dhi[f]) * ld(hi[f]);
  if (b)
    for (int c = lane; c < C; c += 32) dot += ld(dyi[c]) * ld(b[c]);
  dot = detail::warp_sum(dot);
  if (lane == 0) dw[r] = dot;
  const float wi = w[r];  // each lane scales only what it read: no barrier needed
  for (int f = lane; f < F; f += 32) dhi[f] = st<T>(wi * ld(dhi[f]));
  for (int c = lane; c < C; c += 32) dyi[c] = st<T>(wi * ld(dyi[c]));
}

__device__ __forceinline__ float sigmoid(float g) { return 1.f / (1.f + expf(-g)); }

template <typename T>
__global__ void sigmoid_gate_forward_kernel(T* out, const T* y, const T* g, int N, int C) {
  MT_FOR_ROWS(t, N) {
    const float s = sigmoid(ld(g[t]));
    T* o = out + size_t(t) * C;
    const T* yt = y + size_t(t) * C;
    MT_FOR_COLS(c, C) o[c] = st<T>(ld(o[c]) + s * ld(yt[c]));
  }
}

template <typename T>
__global__ void sigmoid_gate_backward_kernel(T* dy, T* dg, const T* dout, const T* y, const T* g, int N, int C) {
  const int t = blockIdx.x * kRowWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (t >= N) return;
  const float s = sigmoid(ld(g[t]));
  const T* d = dout + size_t(t) * C;
  const T* yt = y + size_t(t) * C;
  T* dyt = dy + size_t(t) * C;
  float dot = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float gd = ld(d[c]);
    dyt[c] = st<T>(s * gd);
    dot += gd * ld(yt[c]);
  }
  dot = detail::warp_sum(dot);
  if (lane == 0) dg[t] = st<T>(s * (1.f - s) * dot);
}

unsigned row_blocks(int n) { return unsigned((n + kRowWarps - 1) / kRowWarps); }

}  // namespace

size_t moe_route_forward_scratch(const RouterShape& s) {
  if (s.N <= 0 || s.E <= 0) return 0;
  return size_t(route_parts(s.N)) * 2 * size_t(s.E);
}

template <typename T>
CudaStatus moe_route_forward(int32_t* idx, float* w, float* stats, const T* logits, const RouterShape& s,
                             float* scratch, cudaStream_t stream) {
  if (s.N <= 0) return {};
  MT_CUDA_TRY(check_router(s, "moe_route_forward: needs 1 <= k <= E <= kMoeMaxExperts"));
  if (stats && !scratch) return invalid_value("moe_route_forward: scratch is required for stats");
  const size_t shared = size_t(3 * kRouteWarps) * s.E * sizeof(float) + size_t(kRouteWarps) * s.k * sizeof(int);
  if (shared > kSharedLimit) return invalid_value("moe_route_forward: E too large for shared memory");
  const int tpb = route_tokens_per_block(s.N), parts = route_parts(s.N);
  clear_last_error();
  moe_route_forward_kernel<T><<<parts, 32 * kRouteWarps, shared, stream>>>(idx, w, stats ? scratch : nullptr, logits, s,
                                                                        tpb);
  MT_CUDA_TRY(launched("moe_route_forward_kernel"));
  if (!stats) return {};
  const int n = 2 * s.E;
  clear_last_error();
  moe_route_stats_kernel<<<(n + 127) / 128, 128, 0, stream>>>(stats, scratch, parts, n);
  return launched("moe_route_stats_kernel");
}

template <typename T>
CudaStatus moe_route_backward(T* dlogits, const float* dw, const T* logits, const int32_t* idx, const float* w,
                              const float* counts, float aux_scale, const RouterShape& s, cudaStream_t stream) {
  if (s.N <= 0) return {};
  MT_CUDA_TRY(check_router(s, "moe_route_backward: needs 1 <= k <= E <= kMoeMaxExperts"));
  const size_t shared = size_t(kRowWarps) * (size_t(s.E) + size_t(s.k)) * sizeof(float);
  if (shared > kSharedLimit) return invalid_value("moe_route_backward: E too large for shared memory");
  clear_last_error();
  moe_route_backward_kernel<T><<<row_blocks(s.N), 32 * kRowWarps, shared, stream>>>(dlogits, dw, logits, idx, w, counts,
                                                                                 aux_scale, s);
  return launched("moe_route_backward_kernel");
}

CudaStatus moe_sort_scratch(size_t* bytes, int N, int E, int k) {
  *bytes = 0;
  const int n = N * k;
  if (n <= 0 || E <= 0) return {};
  size_t cub_bytes = 0;
  MT_CUDA_CALL(cub::DeviceRadixSort::SortPairs(nullptr, cub_bytes, static_cast<const uint32_t*>(nullptr),
                                               static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                               static_cast<int32_t*>(nullptr), n, 0, expert_bits(E)));
  *bytes = 2 * aligned(size_t(n) * sizeof(int32_t)) + aligned(cub_bytes);
  return {};
}

CudaStatus moe_sort(int32_t* rows, int32_t* offsets, const int32_t* idx, int N, int E, int k, void* scratch,
                    cudaStream_t stream) {
  if (E <= 0) return {};
  const int n = N * k;
  if (n <= 0) return check_cuda(cudaMemsetAsync(offsets, 0, size_t(E + 1) * sizeof(int32_t), stream), "moe_sort");
  if (!scratch) return invalid_value("moe_sort: scratch is required");
  size_t cub_bytes = 0;
  const int bits = expert_bits(E);
  MT_CUDA_CALL(cub::DeviceRadixSort::SortPairs(nullptr, cub_bytes, static_cast<const uint32_t*>(nullptr),
                                               static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                               static_cast<int32_t*>(nullptr), n, 0, bits));
  char* base = static_cast<char*>(scratch);
  auto* slots = reinterpret_cast<int32_t*>(base);
  auto* sorted = reinterpret_cast<uint32_t*>(base + aligned(size_t(n) * sizeof(int32_t)));
  void* cub_temp = base + 2 * aligned(size_t(n) * sizeof(int32_t));
  clear_last_error();
  moe_sort_iota_kernel<<<detail::blocks_for(size_t(n), 256), 256, 0, stream>>>(slots, n);
  MT_CUDA_TRY(launched("moe_sort_iota_kernel"));
  // Expert indices are in [0, E): their uint32 bits are the int32's, and the low `bits` order them.
  MT_CUDA_CALL(cub::DeviceRadixSort::SortPairs(cub_temp, cub_bytes, reinterpret_cast<const uint32_t*>(idx), sorted,
                                               slots, rows, n, 0, bits, stream));
  clear_last_error();
  moe_sort_offsets_kernel<<<(E + 1 + 127) / 128, 128, 0, stream>>>(offsets, sorted, n, E);
  return launched("moe_sort_offsets_kernel");
}

template <typename T>
CudaStatus moe_gather(T* out, const T* x, const int32_t* rows, int n, int C, int k, cudaStream_t stream) {
  if (n <= 0 || C <= 0) return {};
  clear_last_error();
  moe_gather_kernel<<<detail::rows_grid(n, C, 256), 256, 0, stream>>>(out, x, rows, n, C, k);
  return launched("moe_gather_kernel");
}

template <typename T>
CudaStatus moe_scatter(T* out, const T* y, const int32_t* rows, const float* w, int n, int C, int k,
                       cudaStream_t stream) {
  if (n <= 0 || C <= 0) return {};
  clear_last_error();
  moe_scatter_kernel<<<detail::rows_grid(n, C, 256), 256, 0, stream>>>(out, y, rows, w, n, C, k);
  return launched("moe_scatter_kernel");
}

template <typename T>
CudaStatus moe_weight_backward(float* dw, T* dh, T* dy, const T* h, const T* b, const int32_t* rows, const float* w,
                               int n, int F, int C, cudaStream_t stream) {
  if (n <= 0) return {};
  clear_last_error();
  moe_weight_backward_kernel<<<row_blocks(n), 32 * kRowWarps, 0, stream>>>(dw, dh, dy, h, b, rows, w, n, F, C);
  return launched("moe_weight_backward_kernel");
}

template <typename T>
CudaStatus sigmoid_gate_forward(T* out, const T* y, const T* g, int N, int C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return {};
  clear_last_error();
  sigmoid_gate_forward_kernel<<<detail::rows_grid(N, C, 256), 256, 0, stream>>>(out, y, g, N, C);
  return launched("sigmoid_gate_forward_kernel");
}

template <typename T>
CudaStatus sigmoid_gate_backward(T* dy, T* dg, const T* dout, const T* y, const T* g, int N, int C,
                                 cudaStream_t stream) {
  if (N <= 0) return {};
  clear_last_error();
  sigmoid_gate_backward_kernel<<<row_blocks(N), 32 * kRowWarps, 0, stream>>>(dy, dg, dout, y, g, N, C);
  return launched("sigmoid_gate_backward_kernel");
}

#define MT_INSTANTIATE(T)                                                                                             \
  template CudaStatus moe_route_forward<T>(int32_t*, float*, float*, const T*, const RouterShape&, float*,            \
                                           cudaStream_t);                                                             \
  template CudaStatus moe_route_backward<T>(T*, const float*, const T*, const int32_t*, const float*, const float*,   \
                                            float, const RouterShape&, cudaStream_t);                                 \
  template CudaStatus moe_gather<T>(T*, const T*, const int32_t*, int, int, int, cudaStream_t);                       \
  template CudaStatus moe_scatter<T>(T*, const T*, const int32_t*, const float*, int, int, int, cudaStream_t);        \
  template CudaStatus moe_weight_backward<T>(float*, T*, T*, const T*, const T*, const int32_t*, const float*, int,   \
                                             int, int, cudaStream_t);                                                 \
  template CudaStatus sigmoid_gate_forward<T>(T*, const T*, const T*, int, int, cudaStream_t);                        \
  template CudaStatus sigmoid_gate_backward<T>(T*, T*, const T*, const T*, const T*, int, int, cudaStream_t);
MT_INSTANTIATE(float)
MT_INSTANTIATE(__nv_bfloat16)
#undef MT_INSTANTIATE

}  // namespace mt::cuda

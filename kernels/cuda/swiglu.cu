#include <cuda_bf16.h>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/swiglu.cuh"

namespace mt::cuda {

namespace {

using detail::ld;
using detail::st;

// act(g) and its derivative (kernels/cpu/swiglu.cc has the same formulas).
struct Gate {
  float value, slope;
};
__device__ __forceinline__ Gate gate(float g, Activation act) {
  if (act.kind == GateActivation::kGeluTanh) {
    const float k = 0.7978845608028654f, c = 0.044715f;
    const float t = tanhf(k * (g + c * g * g * g));
    return {0.5f * g * (1.f + t), 0.5f * (1.f + t) + 0.5f * g * (1.f - t * t) * k * (1.f + 3.f * c * g * g)};
  }
  const float a = act.kind == GateActivation::kClampedSwiglu ? act.alpha : 1.f;
  const float s = 1.f / (1.f + expf(-a * g));
  return {g * s, s + g * a * s * (1.f - s)};
}

// The gate and up values the activation reads, and whether each passes a gradient: gpt-oss
// clamps both (gate from above, up on both sides) and adds 1 to up.
struct GateUp {
  float g, u;
  bool g_passes, u_passes;
};
__device__ __forceinline__ GateUp gate_up(float g, float u, Activation act) {
  if (act.kind != GateActivation::kClampedSwiglu) return {g, u, true, true};
  const float l = act.limit;
  // std::min / std::max's NaN behaviour (the CPU's): a NaN stays NaN; fminf would return the bound
  const float uc = u < -l ? -l : u;
  return {l < g ? l : g, (l < uc ? l : uc) + 1.f, g <= l, u >= -l && u <= l};
}

template <typename T>
__global__ void swiglu_forward_kernel(T* out, const T* gu, int N, int F, Activation act) {
  MT_FOR_ROWS(n, N) {
    const T* g_row = gu + size_t(n) * 2 * F;  // [gate | up]
    T* o = out + size_t(n) * F;
    MT_FOR_COLS(f, F) {
      const GateUp x = gate_up(ld(g_row[f]), ld(g_row[F + f]), act);
      o[f] = st<T>(gate(x.g, act).value * x.u);
    }
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(T* dgu, const T* dout, const T* gu, int N, int F, Activation act) {
  MT_FOR_ROWS(n, N) {
    const T* g_row = gu + size_t(n) * 2 * F;
    const T* dy_row = dout + size_t(n) * F;
    T* d_row = dgu + size_t(n) * 2 * F;
    MT_FOR_COLS(f, F) {
      const GateUp x = gate_up(ld(g_row[f]), ld(g_row[F + f]), act);
      const float dy = ld(dy_row[f]);
      const Gate a = gate(x.g, act);
      d_row[f] = st<T>(x.g_passes ? dy * x.u * a.slope : 0.f);
      d_row[F + f] = st<T>(x.u_passes ? dy * a.value : 0.f);
    }
  }
}

}  // namespace

template <typename T>
CudaStatus swiglu_forward(T* out, const T* gu, int N, int F, cudaStream_t stream, Activation act) {
  if (N <= 0 || F <= 0) return {};
  clear_last_error();
  swiglu_forward_kernel<<<detail::rows_grid(N, F, 256), 256, 0, stream>>>(out, gu, N, F, act);
  return launched("swiglu_forward_kernel");
}

template <typename T>
CudaStatus swiglu_backward(T* dgu, const T* dout, const T* gu, int N, int F, cudaStream_t stream,
                           Activation act) {
  if (N <= 0 || F <= 0) return {};
  clear_last_error();
  swiglu_backward_kernel<<<detail::rows_grid(N, F, 256), 256, 0, stream>>>(dgu, dout, gu, N, F, act);
  return launched("swiglu_backward_kernel");
}

#define MT_INSTANTIATE(T)                                                                  \
  template CudaStatus swiglu_forward<T>(T*, const T*, int, int, cudaStream_t, Activation); \
  template CudaStatus swiglu_backward<T>(T*, const T*, const T*, int, int, cudaStream_t, Activation);
MT_INSTANTIATE(float)
MT_INSTANTIATE(__nv_bfloat16)
#undef MT_INSTANTIATE

}  // namespace mt::cuda

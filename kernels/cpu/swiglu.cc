// Gated activations: out = act(gate) * up (gpt-oss: a clamped variant), gu rows [gate (F) | up (F)].
// Elementwise, parallel over rows.
#include "kernels/swiglu.h"

#include <cmath>

#include "kernels/cpu/common.h"

namespace mt {
const char* gate_activation_name(GateActivation a) {
  return a == GateActivation::kGeluTanh ? "gelu_pytorch_tanh" : a == GateActivation::kClampedSwiglu ? "clamped swiglu" : "silu";
}
}  // namespace mt

namespace mt::cpu {
namespace {

// act(g) and its derivative.
template <typename T>
struct Gate {
  T value, slope;
};
template <typename T>
Gate<T> silu(T g) {
  const T s = T(1) / (T(1) + detail::fast_exp(-g));
  return {g * s, s + g * s * (T(1) - s)};
}
// 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))), as torch's gelu(approximate="tanh").
template <typename T>
Gate<T> gelu_tanh(T g) {
  const T k = T(0.7978845608028654), c = T(0.044715);
  const T t = detail::fast_tanh(k * (g + c * g * g * g));
  return {T(0.5) * g * (T(1) + t), T(0.5) * (T(1) + t) + T(0.5) * g * (T(1) - t * t) * k * (T(1) + T(3) * c * g * g)};
}
// The loops are written once per activation (a template argument), so each stays a plain,
// vectorisable loop with no per-element branch.
template <typename T, Gate<T> (*act)(T)>
void forward_rows(T* out, const T* gu, int N, int F) {
  MT_OMP(parallel for schedule(static) if (detail::worth_parallel(long(N) * F)))
  for (int n = 0; n < N; ++n) {
    const T* g = gu + long(n) * 2 * F;
    const T* u = g + F;
    T* y = out + long(n) * F;
    for (int f = 0; f < F; ++f) y[f] = act(g[f]).value * u[f];
  }
}

template <typename T, Gate<T> (*act)(T)>
void backward_rows(T* dgu, const T* dout, const T* gu, int N, int F) {
  MT_OMP(parallel for schedule(static) if (detail::worth_parallel(long(N) * F)))
  for (int n = 0; n < N; ++n) {
    const T* g = gu + long(n) * 2 * F;
    const T* u = g + F;
    const T* dy = dout + long(n) * F;
    T* dg = dgu + long(n) * 2 * F;
    T* du = dg + F;
    for (int f = 0; f < F; ++f) {
      const Gate<T> a = act(g[f]);
      dg[f] = dy[f] * u[f] * a.slope;
      du[f] = dy[f] * a.value;
    }
  }
}

// gpt-oss: g = min(gate, limit), u = clamp(up, -limit, limit), out = (u + 1) * g * sigmoid(alpha g).
// A clamped value passes no gradient (torch.clamp's: the bounds themselves still pass it).
template <typename T>
void clamped_forward_rows(T* out, const T* gu, int N, int F, T alpha, T limit) {
  MT_OMP(parallel for schedule(static) if (detail::worth_parallel(long(N) * F)))
  for (int n = 0; n < N; ++n) {
    const T* g = gu + long(n) * 2 * F;
    const T* u = g + F;
    T* y = out + long(n) * F;
    for (int f = 0; f < F; ++f) {
      const T gc = std::min(g[f], limit), uc = std::min(std::max(u[f], -limit), limit);
      y[f] = (uc + T(1)) * gc / (T(1) + detail::fast_exp(-alpha * gc));
    }
  }
}

template <typename T>
void clamped_backward_rows(T* dgu, const T* dout, const T* gu, int N, int F, T alpha, T limit) {
  MT_OMP(parallel for schedule(static) if (detail::worth_parallel(long(N) * F)))
  for (int n = 0; n < N; ++n) {
    const T* g = gu + long(n) * 2 * F;
    const T* u = g + F;
    const T* dy = dout + long(n) * F;
    T* dg = dgu + long(n) * 2 * F;
    T* du = dg + F;
    for (int f = 0; f < F; ++f) {
      const T gc = std::min(g[f], limit), uc = std::min(std::max(u[f], -limit), limit);
      const T s = T(1) / (T(1) + detail::fast_exp(-alpha * gc));
      const T glu = gc * s;
      dg[f] = g[f] <= limit ? dy[f] * (uc + T(1)) * (s + glu * alpha * (T(1) - s)) : T(0);
      du[f] = u[f] >= -limit && u[f] <= limit ? dy[f] * glu : T(0);
    }
  }
}

}  // namespace

template <typename T>
void swiglu_forward(T* out, const T* gu, int N, int F, Activation act) {
  if (act.kind == GateActivation::kGeluTanh) forward_rows<T, gelu_tanh<T>>(out, gu, N, F);
  else if (act.kind == GateActivation::kClampedSwiglu) clamped_forward_rows<T>(out, gu, N, F, T(act.alpha), T(act.limit));
  else forward_rows<T, silu<T>>(out, gu, N, F);
}

template <typename T>
void swiglu_backward(T* dgu, const T* dout, const T* gu, int N, int F, Activation act) {
  if (act.kind == GateActivation::kGeluTanh) backward_rows<T, gelu_tanh<T>>(dgu, dout, gu, N, F);
  else if (act.kind == GateActivation::kClampedSwiglu)
    clamped_backward_rows<T>(dgu, dout, gu, N, F, T(act.alpha), T(act.limit));
  else backward_rows<T, silu<T>>(dgu, dout, gu, N, F);
}

#define MT_INSTANTIATE(T)                                               \
  template void swiglu_forward<T>(T*, const T*, int, int, Activation); \
  template void swiglu_backward<T>(T*, const T*, const T*, int, int, Activation);
MT_INSTANTIATE(float)
MT_INSTANTIATE(double)
#undef MT_INSTANTIATE

}  // namespace mt::cpu

// SwiGLU gate: out = silu(gate) * up. gu rows are [gate (F) | up (F)] (the fused gate/up
// projection), out [N, F].
#pragma once

namespace mt::cpu {

template <typename T>
void swiglu_forward(T* out, const T* gu, int N, int F);

// dgu (same layout as gu) is overwritten.
template <typename T>
void swiglu_backward(T* dgu, const T* dout, const T* gu, int N, int F);

}  // namespace mt::cpu

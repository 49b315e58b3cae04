// Gated MLP activation: out = act(gate) * up, act SiLU (SwiGLU: Llama, Qwen, Mistral, Phi, OLMo)
// or GELU with the tanh approximation (GeGLU: Gemma's gelu_pytorch_tanh); or gpt-oss's clamped
// SwiGLU, out = (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha g) with g = min(gate, limit)
// (no gradient through a clamped value). gu rows are [gate (F) | up (F)] (the fused gate/up
// projection), out [N, F].
#pragma once

namespace mt {
enum class GateActivation { kSilu, kGeluTanh, kClampedSwiglu };
const char* gate_activation_name(GateActivation a);

// An activation with its parameters (alpha and limit: the clamped SwiGLU's only).
struct Activation {
  Activation(GateActivation k = GateActivation::kSilu, float a = 1.702f, float l = 7.0f) : kind(k), alpha(a), limit(l) {}
  GateActivation kind;
  float alpha, limit;
  bool operator==(const Activation&) const = default;
};
}  // namespace mt

namespace mt::cpu {

template <typename T>
void swiglu_forward(T* out, const T* gu, int N, int F, Activation act = {});

// dgu (same layout as gu) is overwritten.
template <typename T>
void swiglu_backward(T* dgu, const T* dout, const T* gu, int N, int F, Activation act = {});

}  // namespace mt::cpu

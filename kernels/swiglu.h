// Gated MLP activation: out = act(gate) * up, act SiLU (SwiGLU: Llama, Qwen, Mistral, Phi, OLMo)
// or GELU with the tanh approximation (GeGLU: Gemma's gelu_pytorch_tanh). gu rows are
// [gate (F) | up (F)] (the fused gate/up projection), out [N, F].
#pragma once

namespace mt {
enum class GateActivation { kSilu, kGeluTanh };
const char* gate_activation_name(GateActivation a);
}  // namespace mt

namespace mt::cpu {

template <typename T>
void swiglu_forward(T* out, const T* gu, int N, int F, GateActivation act = GateActivation::kSilu);

// dgu (same layout as gu) is overwritten.
template <typename T>
void swiglu_backward(T* dgu, const T* dout, const T* gu, int N, int F, GateActivation act = GateActivation::kSilu);

}  // namespace mt::cpu

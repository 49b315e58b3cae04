// Token embedding lookup. tokens [N] (each < V), wte [V, C], out [N, C].
#pragma once
#include <cstdint>

namespace mt::cpu {

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, int N, int C);

// dwte[tokens[i]] += dout[i], summed in token order for every channel (deterministic).
template <typename T>
void embedding_backward(T* dwte, const T* dout, const int32_t* tokens, int N, int C);

}  // namespace mt::cpu

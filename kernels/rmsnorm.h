// RMSNorm (Llama): out = inp * rstd * (weight + offset), rstd = 1 / sqrt(mean(inp^2) + eps), per
// row. offset is 0 for Llama's scale, 1 for Gemma's (1 + w, its weights initialised to 0).
// inp/out [N, C], weight [C], rstd [N] (saved for backward).
#pragma once

namespace mt::cpu {

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int N, int C, float eps, float offset = 0);

// The CUDA backward sums dweight over at most this many row partials (a bounded scratch of
// kRmsnormMaxParts x C floats); the planner counts that scratch from here.
constexpr int kRmsnormMaxParts = 256;

// Accumulating: dinp += dL/dinp, dweight += dL/dweight.
template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                      const T* rstd, int N, int C, float offset = 0);

}  // namespace mt::cpu

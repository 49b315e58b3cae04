// Which library computes the CPU GEMMs (gemm<float> and gemm_bf16 of kernels/matmul.h), with
// which kernel, chosen once at run time among the providers linked in:
//   fp32: OpenBLAS unless its kernel is generic on this CPU (e.g. Prescott/SSE3 on an AVX-512
//         machine whose model name it cannot identify), then oneDNN when linked; the portable
//         blocked GEMM when neither is there.
//   bf16: oneDNN's matmul where the CPU has native bf16 (AVX512-BF16 or AMX) and oneDNN runs it
//         with a native kernel; otherwise the portable widen-to-fp32-then-gemm<float> path.
// MEGATRAIN_GEMM=openblas|onednn|blocked and MEGATRAIN_GEMM_BF16=onednn|portable (read at the
// first GEMM) force a provider that is linked in. Every provider is deterministic for a fixed
// thread count.
#pragma once
#include <string>
#include <vector>

namespace mt::cpu {

struct GemmProvider {
  std::string name;     // "openblas", "onednn", "blocked" (fp32); "onednn", "portable" (bf16)
  std::string version;  // e.g. "0.3.21"; empty for our own code
  std::string kernel;   // e.g. "Cooperlake", "avx512_core_bf16", "brg:avx512_core_bf16"
  bool fallback = false;  // a generic kernel runs on a CPU that has a better one
  std::string note;       // why this provider; non-empty when something was passed over
  std::string summary() const;  // "openblas 0.3.21 Cooperlake"
};

const GemmProvider& gemm_provider();       // gemm<float>
const GemmProvider& gemm_bf16_provider();  // gemm_bf16

// One line for a startup log: the fp32 and bf16 providers, and a loud warning when the fp32
// GEMM runs a generic kernel (empty warning otherwise).
std::string gemm_provider_line();
std::string gemm_fallback_warning();

// Providers linked into this build (fp32: subset of openblas, onednn, blocked; bf16: onednn,
// portable), and a switch for tests and benches: false (no change) when `name` is not linked
// or cannot run here.
std::vector<std::string> linked_gemm_providers();
std::vector<std::string> linked_gemm_bf16_providers();
bool use_gemm_provider(const std::string& name);
bool use_gemm_bf16_provider(const std::string& name);

}  // namespace mt::cpu

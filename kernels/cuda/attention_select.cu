// Which attention kernel bf16 storage uses (attention.cuh: attention_kernel), and whether the
// tensor-core one can take a call (attention_mma.cuh: mma_supports).
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_mma.cuh"

namespace mt::cuda {
namespace {

// The tensor-core and cuDNN kernels are opt-in until a GPU run has verified them (docs/PERF.md):
// both were written after the one lease of 2026-11-30.
AttentionKernel from_environment() {
  AttentionKernel k = AttentionKernel::kSimt;
  const char* v = std::getenv("MEGATRAIN_ATTENTION");
  return v && parse_attention_kernel(v, &k) ? k : AttentionKernel::kSimt;
}

// -1 until the first call reads the environment or set_attention_kernel sets it.
std::atomic<int> selected{-1};

}  // namespace

AttentionKernel attention_kernel() {
  int k = selected.load();
  if (k < 0) {
    int expected = -1;
    selected.compare_exchange_strong(expected, int(from_environment()));
    k = selected.load();
  }
  return AttentionKernel(k);
}

void set_attention_kernel(AttentionKernel kernel) { selected.store(int(kernel)); }

const char* attention_kernel_name(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::kTensorCore:
      return "mma";
    case AttentionKernel::kCudnn:
      return "cudnn";
    case AttentionKernel::kSimt:
      break;
  }
  return "simt";
}

bool parse_attention_kernel(const char* name, AttentionKernel* kernel) {
  for (AttentionKernel k : {AttentionKernel::kCudnn, AttentionKernel::kTensorCore, AttentionKernel::kSimt})
    if (std::strcmp(name, attention_kernel_name(k)) == 0) return *kernel = k, true;
  return false;
}

namespace attn {

bool mma_supports(const Geo& g, std::initializer_list<const void*> tensors) {
  // soft-capped scores (Gemma 2) run on the SIMT kernel only
  if (attention_kernel() != AttentionKernel::kTensorCore || (g.D != 64 && g.D != 128) || g.softcap > 0) return false;
  for (const void* p : tensors)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

}  // namespace attn
}  // namespace mt::cuda

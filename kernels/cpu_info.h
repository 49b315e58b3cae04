// The CPU at hand: its model name and vector ISA (CPUID), and which of the kernels' compiled
// ISA variants the vectorised CPU kernels (fused AdamW, elementwise helpers) dispatch to.
#pragma once
#include <string>

namespace mt::cpu {

struct CpuInfo {
  std::string model;  // CPUID brand string, e.g. "AMD EPYC" (a VM may hide the real one)
  bool avx2 = false, fma = false;
  bool avx512f = false, avx512bw = false, avx512vl = false;
  bool avx512_bf16 = false;  // VDPBF16PS: native bf16 dot products
  bool amx_bf16 = false;     // AMX tiles with bf16
};

// Detected once (CPUID and the OS's saved-register support, so AVX-512 needs both).
const CpuInfo& cpu_info();

// The ISA variants the vectorised kernels are compiled for, one source each (kernels/cpu/isa.h).
// kBaseline is what the build flags target (AVX2 + FMA on x86-64 builds).
enum class Isa { kBaseline, kAvx512 };

// The variant running now: the widest this CPU supports, unless forced (below) or
// MEGATRAIN_CPU_ISA=avx2|baseline in the environment at the first call.
Isa kernel_isa();
const char* isa_name(Isa isa);  // "avx512", "avx2" (the baseline on x86-64), or "baseline"
bool isa_supported(Isa isa);
// For tests and benches: run the given variant from now on; false (and no change) when this
// CPU or build cannot run it.
bool force_kernel_isa(Isa isa);

}  // namespace mt::cpu

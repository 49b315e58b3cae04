// CPUID, read once; and the kernels' ISA variant (kernel_isa), chosen once and overridable.
#include "kernels/cpu_info.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/isa.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace mt::cpu {
namespace {

#if defined(__x86_64__)
bool bit(unsigned reg, int b) { return (reg >> b) & 1u; }

// XCR0: the register state the OS saves (asm, so no -mxsave is needed to build this).
unsigned long long xgetbv0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}

CpuInfo detect() {
  CpuInfo c;
  unsigned a = 0, b = 0, cx = 0, d = 0;
  if (__get_cpuid_max(0x80000000u, nullptr) >= 0x80000004u) {
    unsigned brand[12];
    for (unsigned i = 0; i < 3; ++i)
      __get_cpuid(0x80000002u + i, &brand[4 * i], &brand[4 * i + 1], &brand[4 * i + 2], &brand[4 * i + 3]);
    char s[49] = {};
    std::memcpy(s, brand, 48);
    c.model = s;
    while (!c.model.empty() && c.model.back() == ' ') c.model.pop_back();
    c.model.erase(0, c.model.find_first_not_of(' '));
  }
  if (!__get_cpuid(1, &a, &b, &cx, &d)) return c;
  const bool osxsave = bit(cx, 27);
  const unsigned long long xcr0 = osxsave ? xgetbv0() : 0;
  const bool os_avx = (xcr0 & 0x6) == 0x6;            // XMM and YMM state
  const bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM halves
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;     // XTILECFG, XTILEDATA
  c.fma = os_avx && bit(cx, 12);
  if (__get_cpuid_max(0, nullptr) < 7) return c;
  __cpuid_count(7, 0, a, b, cx, d);
  c.avx2 = os_avx && bit(b, 5);
  c.avx512f = os_avx512 && bit(b, 16);
  c.avx512bw = os_avx512 && bit(b, 30);
  c.avx512vl = os_avx512 && bit(b, 31);
  c.amx_bf16 = os_amx && bit(d, 22);
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  __cpuid_count(7, 1, a1, b1, c1, d1);
  c.avx512_bf16 = os_avx512 && bit(a1, 5);
  return c;
}
#else
CpuInfo detect() { return CpuInfo{}; }
#endif

Isa widest() {
  const CpuInfo& c = cpu_info();
  if (MT_HAVE_AVX512_VARIANT && c.avx512f && c.avx512bw && c.avx512vl) return Isa::kAvx512;
  return Isa::kBaseline;
}

Isa initial() {
  const char* env = std::getenv("MEGATRAIN_CPU_ISA");
  if (env != nullptr && (!std::strcmp(env, "avx2") || !std::strcmp(env, "baseline"))) return Isa::kBaseline;
  return widest();
}

std::atomic<Isa>& current() {
  static std::atomic<Isa> isa{initial()};
  return isa;
}

}  // namespace

const CpuInfo& cpu_info() {
  static const CpuInfo info = detect();
  return info;
}

Isa kernel_isa() { return current().load(std::memory_order_relaxed); }

const char* isa_name(Isa isa) {
  if (isa == Isa::kAvx512) return "avx512";
#if defined(__AVX2__)
  return "avx2";
#else
  return "baseline";
#endif
}

bool isa_supported(Isa isa) { return isa == Isa::kBaseline || widest() == Isa::kAvx512; }

bool force_kernel_isa(Isa isa) {
  if (!isa_supported(isa)) return false;
  current().store(isa, std::memory_order_relaxed);
  return true;
}

}  // namespace mt::cpu

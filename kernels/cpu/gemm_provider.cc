// Chooses the CPU GEMM providers once (kernels/gemm_provider.h) and describes them.
#include "kernels/gemm_provider.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/gemm_backends.h"
#include "kernels/cpu_info.h"

#ifdef MEGATRAIN_HAVE_BLAS
// OpenBLAS's own queries; weak, so a CBLAS that is not OpenBLAS leaves them null.
extern "C" __attribute__((weak)) char* openblas_get_corename(void);
extern "C" __attribute__((weak)) char* openblas_get_config(void);
#endif

namespace mt::cpu {
namespace {

using detail::GemmBf16;
using detail::Sgemm;

// Vector ISA levels, to compare a library's kernel with what the CPU can run.
enum Level { kSse = 0, kAvx = 1, kAvx2 = 2, kAvx512 = 3 };

Level cpu_level() {
  const CpuInfo& c = cpu_info();
  if (c.avx512f && c.avx512bw && c.avx512vl) return kAvx512;
  if (c.avx2 && c.fma) return kAvx2;
  return kSse;
}

struct Choice {
  GemmProvider fp32, bf16;
  std::atomic<Sgemm> sgemm{Sgemm::kBlocked};
  std::atomic<GemmBf16> gemm_bf16{GemmBf16::kPortable};
};

bool env_is(const char* var, const char* value) {
  const char* e = std::getenv(var);
  return e != nullptr && std::strcmp(e, value) == 0;
}

GemmProvider blocked_provider() {
  GemmProvider p;
  p.name = "blocked";
  p.kernel = std::string("portable ") + isa_name(Isa::kBaseline);
  p.fallback = cpu_level() >= kAvx2;  // ~3x below a tuned sgemm on such a CPU
  return p;
}

#ifdef MEGATRAIN_HAVE_BLAS
// The ISA of an OpenBLAS DYNAMIC_ARCH core (driver/others/dynamic.c's names). Anything not
// named here is one of its pre-AVX kernels (Prescott, Katmai, Core2, Penryn, Nehalem, Atom,
// Opteron, Barcelona, Bobcat, ...): the "generic" fallback.
Level openblas_core_level(const std::string& core) {
  for (const char* c : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    if (core == c) return kAvx512;
  for (const char* c : {"Haswell", "Zen", "Excavator"})
    if (core == c) return kAvx2;
  for (const char* c : {"Sandybridge", "Bulldozer", "Piledriver", "Steamroller"})
    if (core == c) return kAvx;
  return kSse;
}

GemmProvider openblas_provider() {
  GemmProvider p;
  p.name = "openblas";
  if (openblas_get_corename == nullptr || openblas_get_config == nullptr) {
    p.name = "cblas";
    p.kernel = "unknown";
    return p;
  }
  p.kernel = openblas_get_corename();
  const std::string config = openblas_get_config();  // "OpenBLAS 0.3.21 DYNAMIC_ARCH ..."
  const size_t sp = config.find(' ');
  p.version = config.substr(sp + 1, config.find(' ', sp + 1) - sp - 1);
  p.fallback = openblas_core_level(p.kernel) < cpu_level();
  return p;
}
#endif

#ifdef MEGATRAIN_HAVE_ONEDNN
GemmProvider onednn_provider() {
  GemmProvider p;
  p.name = "onednn";
  p.version = detail::onednn_version();
  p.kernel = detail::onednn_isa();  // oneDNN JITs for the CPU's features, never by model name
  return p;
}

Level onednn_level(const std::string& isa) {
  if (isa.rfind("avx512", 0) == 0) return kAvx512;
  if (isa.rfind("avx2", 0) == 0) return kAvx2;
  return isa == "avx" ? kAvx : kSse;
}

// oneDNN's bf16 matmul is worth running only where the CPU has bf16 dot products, oneDNN
// targets them, and its implementation is not the reference loop.
bool onednn_bf16_native(const std::string& isa) {
  const CpuInfo& c = cpu_info();
  return (c.avx512_bf16 || c.amx_bf16) &&
         (isa == "avx512_core_bf16" || isa == "avx512_core_amx") &&
         detail::onednn_bf16_kernel().rfind("ref", 0) != 0;
}
#endif

void choose_fp32(Choice& ch) {
  ch.fp32 = blocked_provider();
  ch.sgemm = Sgemm::kBlocked;
  if (env_is("MEGATRAIN_GEMM", "blocked")) {
    ch.fp32.note = "forced by MEGATRAIN_GEMM";
    return;
  }
#ifdef MEGATRAIN_HAVE_BLAS
  ch.fp32 = openblas_provider();
  ch.sgemm = Sgemm::kOpenblas;
  if (env_is("MEGATRAIN_GEMM", "openblas")) {
    ch.fp32.note = "forced by MEGATRAIN_GEMM";
    return;
  }
#endif
#ifdef MEGATRAIN_HAVE_ONEDNN
  const bool forced = env_is("MEGATRAIN_GEMM", "onednn");
  if (forced || ch.fp32.fallback) {
    const std::string passed_over = ch.fp32.summary();
    ch.fp32 = onednn_provider();
    ch.sgemm = Sgemm::kOnednn;
    ch.fp32.fallback = onednn_level(ch.fp32.kernel) < cpu_level();
    ch.fp32.note = forced ? "forced by MEGATRAIN_GEMM"
                          : passed_over + " is a generic kernel on this CPU; using oneDNN";
  }
#endif
}

void choose_bf16(Choice& ch) {
  ch.bf16.name = "portable";
  ch.bf16.kernel = "widen to fp32, then " + ch.fp32.summary();
  ch.gemm_bf16 = GemmBf16::kPortable;
#ifdef MEGATRAIN_HAVE_ONEDNN
  if (env_is("MEGATRAIN_GEMM_BF16", "portable")) {
    ch.bf16.note = "forced by MEGATRAIN_GEMM_BF16";
    return;
  }
  GemmProvider dn = onednn_provider();
  const bool native = onednn_bf16_native(dn.kernel);
  if (native || env_is("MEGATRAIN_GEMM_BF16", "onednn")) {
    if (!native) dn.note = "forced by MEGATRAIN_GEMM_BF16; not native on this CPU";
    ch.bf16 = dn;
    ch.gemm_bf16 = GemmBf16::kOnednn;
  } else {
    ch.bf16.note = "oneDNN's bf16 is not native on this CPU (" + dn.kernel + ")";
  }
#endif
}

std::string warning_for(const GemmProvider& p) {
  if (!p.fallback) return "";
  const CpuInfo& c = cpu_info();
  const bool avx512 = cpu_level() == kAvx512;
  std::string fix = p.name == "openblas"
                        ? std::string("set OPENBLAS_CORETYPE=") + (avx512 ? "SkylakeX" : "Haswell") +
                              " or install oneDNN (libdnnl-dev)"
                        : "build with OpenBLAS or oneDNN (scripts/install_deps.sh)";
  if (p.note.rfind("forced", 0) == 0) fix = "unset MEGATRAIN_GEMM";
  return "the fp32 GEMM runs a generic kernel (" + p.summary() + ") on a CPU with " +
         (avx512 ? "AVX-512" : "AVX2") + " (" + (c.model.empty() ? "unnamed" : c.model) +
         "): CPU steps run several times slower than they could; " + fix;
}

// An override naming no provider linked here is ignored, and said so (note and stderr).
void check_override(const char* var, GemmProvider& chosen) {
  const char* e = std::getenv(var);
  if (e == nullptr || chosen.name == e) return;
  const std::string msg = std::string(var) + "=" + e + " names no provider in this build; ignored";
  chosen.note += (chosen.note.empty() ? "" : "; ") + msg;
  std::fprintf(stderr, "megatrain: WARNING: %s\n", msg.c_str());
}

Choice& choice() {
  static Choice* ch = [] {
    auto* c = new Choice();  // never destroyed: GEMMs may run from threads during exit
    choose_fp32(*c);
    choose_bf16(*c);
    check_override("MEGATRAIN_GEMM", c->fp32);
    check_override("MEGATRAIN_GEMM_BF16", c->bf16);
    const std::string warning = warning_for(c->fp32);
    if (!warning.empty()) std::fprintf(stderr, "megatrain: WARNING: %s\n", warning.c_str());
    return c;
  }();
  return *ch;
}

}  // namespace

std::string GemmProvider::summary() const {
  std::string s = name;
  if (!version.empty()) s += " " + version;
  if (!kernel.empty()) s += " " + kernel;
  return s;
}

const GemmProvider& gemm_provider() { return choice().fp32; }
const GemmProvider& gemm_bf16_provider() { return choice().bf16; }

std::string gemm_fallback_warning() { return warning_for(choice().fp32); }

std::string gemm_provider_line() {
  const Choice& ch = choice();
  std::string line = "CPU GEMM: fp32 " + ch.fp32.summary();
  if (!ch.fp32.note.empty()) line += " (" + ch.fp32.note + ")";
  line += "; bf16 " + ch.bf16.summary();
  if (!ch.bf16.note.empty()) line += " (" + ch.bf16.note + ")";
  const std::string warning = warning_for(ch.fp32);
  if (!warning.empty()) line += "; WARNING: " + warning;
  return line;
}

std::vector<std::string> linked_gemm_providers() {
  std::vector<std::string> names;
#ifdef MEGATRAIN_HAVE_BLAS
  names.push_back("openblas");
#endif
#ifdef MEGATRAIN_HAVE_ONEDNN
  names.push_back("onednn");
#endif
  names.push_back("blocked");
  return names;
}

std::vector<std::string> linked_gemm_bf16_providers() {
#ifdef MEGATRAIN_HAVE_ONEDNN
  return {"onednn", "portable"};
#else
  return {"portable"};
#endif
}

// The switches change which backend runs, not the descriptions (they say what was chosen).
bool use_gemm_provider(const std::string& name) {
  Choice& ch = choice();
  if (name == "blocked") return ch.sgemm = Sgemm::kBlocked, true;
#ifdef MEGATRAIN_HAVE_BLAS
  if (name == "openblas" || name == "cblas") return ch.sgemm = Sgemm::kOpenblas, true;
#endif
#ifdef MEGATRAIN_HAVE_ONEDNN
  if (name == "onednn") return ch.sgemm = Sgemm::kOnednn, true;
#endif
  return false;
}

bool use_gemm_bf16_provider(const std::string& name) {
  Choice& ch = choice();
  if (name == "portable") return ch.gemm_bf16 = GemmBf16::kPortable, true;
#ifdef MEGATRAIN_HAVE_ONEDNN
  if (name == "onednn") return ch.gemm_bf16 = GemmBf16::kOnednn, true;
#endif
  return false;
}

namespace detail {
Sgemm sgemm_backend() { return choice().sgemm.load(std::memory_order_relaxed); }
GemmBf16 gemm_bf16_backend() { return choice().gemm_bf16.load(std::memory_order_relaxed); }
}  // namespace detail

}  // namespace mt::cpu

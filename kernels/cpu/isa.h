// One source, several ISAs: MT_TARGET_AVX512 compiles a function for AVX-512 whatever the build
// flags are; the baseline variant is the same source under the build's flags. Kernels write
// their body once as an always-inline template and wrap it twice, then pick the wrapper with
// kernel_isa() (a function pointer load per call, so no per-element cost).
#pragma once
#include "kernels/cpu_info.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MT_HAVE_AVX512_VARIANT 1
#define MT_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,prefer-vector-width=512")))
#else
#define MT_HAVE_AVX512_VARIANT 0
#define MT_TARGET_AVX512
#endif
#define MT_ALWAYS_INLINE inline __attribute__((always_inline))

// The elementwise helpers of common.h that dispatch by ISA: one source (the always-inline
// bodies in common.h), one wrapper per variant of kernels/cpu/isa.h.
#include "kernels/cpu/common.h"
#include "kernels/cpu/isa.h"

namespace mt::cpu::detail {
namespace {

void exp_shifted_baseline(float* s, int n, float shift) { exp_shifted_body<8>(s, n, shift); }

MT_TARGET_AVX512 void exp_shifted_avx512(float* s, int n, float shift) {
  exp_shifted_body<16>(s, n, shift);
}

}  // namespace

void exp_shifted(float* s, int n, float shift) {
  if (kernel_isa() == Isa::kAvx512) {
    exp_shifted_avx512(s, n, shift);
  } else {
    exp_shifted_baseline(s, n, shift);
  }
}

}  // namespace mt::cpu::detail

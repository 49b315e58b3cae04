// The oneDNN GEMM backends: dnnl_sgemm (row-major fp32) and the bf16 x bf16 -> fp32 matmul
// primitive with strides for the transposes and leading dimensions, alpha as an output scale
// and beta as a sum post-op. oneDNN caches the compiled primitive per shape, so a repeated
// shape costs a descriptor and a cache lookup. Exceptions stay inside: a refusal returns false.
#ifdef MEGATRAIN_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/cpu/gemm_backends.h"

namespace mt::cpu::detail {
namespace {

using dnnl::memory;

dnnl::engine& cpu_engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

// op(X) is rows x cols; X is stored row-major with leading dimension ld, transposed or not.
memory::desc matrix(int rows, int cols, int ld, bool trans, memory::data_type dt) {
  const memory::dims strides = trans ? memory::dims{1, ld} : memory::dims{ld, 1};
  return memory::desc({rows, cols}, dt, strides);
}

dnnl::matmul::primitive_desc bf16_matmul(bool ta, bool tb, int M, int N, int K, float alpha,
                                         int lda, int ldb, float beta, int ldc) {
  const auto bf = memory::data_type::bf16;
  dnnl::matmul::desc d(matrix(M, K, lda, ta, bf), matrix(K, N, ldb, tb, bf),
                       matrix(M, N, ldc, false, memory::data_type::f32));
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  return dnnl::matmul::primitive_desc(d, attr, cpu_engine());
}

}  // namespace

bool onednn_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                  const float* B, int ldb, float beta, float* C, int ldc) {
  return dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C,
                    ldc) == dnnl_success;
}

bool onednn_gemm_bf16(bool ta, bool tb, int M, int N, int K, float alpha, const bf16* A, int lda,
                      const bf16* B, int ldb, float beta, float* C, int ldc) {
  try {
    const auto pd = bf16_matmul(ta, tb, M, N, K, alpha, lda, ldb, beta, ldc);
    dnnl::stream s(cpu_engine());
    dnnl::matmul(pd).execute(s, {{DNNL_ARG_SRC, memory(pd.src_desc(), cpu_engine(), const_cast<bf16*>(A))},
                                 {DNNL_ARG_WEIGHTS, memory(pd.weights_desc(), cpu_engine(), const_cast<bf16*>(B))},
                                 {DNNL_ARG_DST, memory(pd.dst_desc(), cpu_engine(), C)}});
    s.wait();
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

std::string onednn_isa() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

std::string onednn_bf16_kernel() {
  try {
    return bf16_matmul(false, true, 64, 64, 64, 1.0f, 64, 64, 0.0f, 64).impl_info_str();
  } catch (const dnnl::error&) {
    return "unsupported";
  }
}

}  // namespace mt::cpu::detail
#endif  // MEGATRAIN_HAVE_ONEDNN

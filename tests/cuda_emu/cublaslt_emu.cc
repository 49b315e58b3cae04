// The part of cuBLASLt that kernels/cuda/gemm.cu calls (and bench_cuda.cc's cublasGemmEx, its
// reference), on the CPU for the CUDA emulation:
// D = alpha op(A) op(B) + beta C in column-major storage, fp32 or bf16 operands, fp32
// accumulation (in blocks of 16 products), one "algorithm". Arguments cuBLASLt would refuse
// (a leading dimension below the rows, an unknown type or attribute) are refused the same way.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstring>
#include <vector>

#include "tests/cuda_emu/streams.h"

namespace {

struct Layout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};
struct Desc {
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
};

template <typename Opaque, typename T>
T* fields(Opaque* o) {
  static_assert(sizeof(T) <= sizeof(o->data));
  return reinterpret_cast<T*>(o->data);
}

float load(const void* p, cudaDataType_t t, size_t i) {
  if (t == CUDA_R_32F) return static_cast<const float*>(p)[i];
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}
void store(void* p, cudaDataType_t t, size_t i, float v) {
  if (t == CUDA_R_32F) static_cast<float*>(p)[i] = v;
  else static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
}

// op(X)[r, c] of a column-major matrix read through its layout.
std::vector<float> operand(const void* p, const Layout& l, cublasOperation_t op) {
  const uint64_t R = op == CUBLAS_OP_N ? l.rows : l.cols, C = op == CUBLAS_OP_N ? l.cols : l.rows;
  std::vector<float> m(R * C);  // row-major R x C, for contiguous dot products below
  for (uint64_t r = 0; r < R; ++r)
    for (uint64_t c = 0; c < C; ++c)
      m[r * C + c] = op == CUBLAS_OP_N ? load(p, l.type, c * uint64_t(l.ld) + r) : load(p, l.type, r * uint64_t(l.ld) + c);
  return m;
}

bool valid(const Layout* l) {
  return l && (l->type == CUDA_R_32F || l->type == CUDA_R_16BF) && l->ld >= int64_t(l->rows) && l->rows > 0 &&
         l->cols > 0;
}

// D = al op(A) op(B) + be C.
void multiply(const Desc& o, const Layout& a, const void* A, const Layout& b, const void* B, const Layout& c,
              const void* C, const Layout& d, void* D, float al, float be, uint64_t M, uint64_t N, uint64_t K) {
  const std::vector<float> opa = operand(A, a, o.ta);  // M x K
  std::vector<float> opbt(N * K);                      // op(B)^T: N x K
  {
    const std::vector<float> opb = operand(B, b, o.tb);  // K x N
    for (uint64_t k = 0; k < K; ++k)
      for (uint64_t n = 0; n < N; ++n) opbt[n * K + k] = opb[k * N + n];
  }
  for (uint64_t n = 0; n < N; ++n)
    for (uint64_t m = 0; m < M; ++m) {
      // Blocks of 16 summed apart, then added: not the CPU reference's k order, so a tolerance
      // tuned here does not rest on the two sharing one order (cuBLAS's is neither).
      float acc = 0.f;
      for (uint64_t k0 = 0; k0 < K; k0 += 16) {
        float part = 0.f;
        for (uint64_t k = k0; k < K && k < k0 + 16; ++k) part += opa[m * K + k] * opbt[n * K + k];
        acc += part;
      }
      const float prior = be == 0.f ? 0.f : be * load(C, c.type, n * uint64_t(c.ld) + m);  // beta 0: C unread
      store(D, d.type, n * uint64_t(d.ld) + m, al * acc + prior);
    }
}

// Checks the operands (refused as cuBLASLt refuses them; outside device memory: stopped) and
// queues D = alpha op(A) op(B) + beta C on the stream; alpha and beta are read now.
cublasStatus_t matmul(const Desc& o, const void* alpha, const void* A, const Layout& a, const void* B, const Layout& b,
                      const void* beta, const void* C, const Layout& c, void* D, const Layout& d, cudaStream_t stream) {
  const uint64_t M = o.ta == CUBLAS_OP_N ? a.rows : a.cols, K = o.ta == CUBLAS_OP_N ? a.cols : a.rows;
  const uint64_t Kb = o.tb == CUBLAS_OP_N ? b.rows : b.cols, N = o.tb == CUBLAS_OP_N ? b.cols : b.rows;
  if (K != Kb || c.rows != M || c.cols != N || d.rows != M || d.cols != N || a.type != b.type)
    return CUBLAS_STATUS_INVALID_VALUE;
  const auto extent = [](const Layout& l) {
    return (uint64_t(l.ld) * (l.cols - 1) + l.rows) * (l.type == CUDA_R_32F ? 4u : 2u);
  };
  mt_emu::check_device_range("cublasLtMatmul", "A", A, extent(a));
  mt_emu::check_device_range("cublasLtMatmul", "B", B, extent(b));
  mt_emu::check_device_range("cublasLtMatmul", "D", D, extent(d));
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  if (be != 0.f) mt_emu::check_device_range("cublasLtMatmul", "C", C, extent(c));
  mt_emu::enqueue(stream, [=] { multiply(o, a, A, b, B, c, C, d, D, al, be, M, N, K); }, true);
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  *h = reinterpret_cast<cublasLtHandle_t>(new char(0));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  delete reinterpret_cast<char*>(h);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale) {
  if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  *d = new cublasLtMatmulDescOpaque_t{};
  *fields<cublasLtMatmulDescOpaque_t, Desc>(*d) = Desc{};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes) {
  Desc* f = fields<cublasLtMatmulDescOpaque_t, Desc>(d);
  if (bytes != sizeof(cublasOperation_t)) return CUBLAS_STATUS_INVALID_VALUE;
  if (attr == CUBLASLT_MATMUL_DESC_TRANSA) std::memcpy(&f->ta, buf, bytes);
  else if (attr == CUBLASLT_MATMUL_DESC_TRANSB) std::memcpy(&f->tb, buf, bytes);
  else return CUBLAS_STATUS_NOT_SUPPORTED;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
  *l = new cublasLtMatrixLayoutOpaque_t{};
  *fields<cublasLtMatrixLayoutOpaque_t, Layout>(*l) = Layout{type, rows, cols, ld};
  return valid(fields<cublasLtMatrixLayoutOpaque_t, Layout>(*l)) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  *p = new cublasLtMatmulPreferenceOpaque_t{};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t,
                                                    const void*, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t* results, int* found) {
  *found = 0;
  if (requested < 1 || !op) return CUBLAS_STATUS_INVALID_VALUE;
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].state = CUBLAS_STATUS_SUCCESS;
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t op, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t la, const void* B, cublasLtMatrixLayout_t lb, const void* beta,
                              const void* C, cublasLtMatrixLayout_t lc, void* D, cublasLtMatrixLayout_t ld,
                              const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t stream) {
  return matmul(*fields<cublasLtMatmulDescOpaque_t, Desc>(op), alpha, A, *fields<cublasLtMatrixLayoutOpaque_t, Layout>(la),
                B, *fields<cublasLtMatrixLayoutOpaque_t, Layout>(lb), beta, C,
                *fields<cublasLtMatrixLayoutOpaque_t, Layout>(lc), D, *fields<cublasLtMatrixLayoutOpaque_t, Layout>(ld),
                stream);
}

struct CublasHandle {
  cudaStream_t stream = nullptr;
};

cublasStatus_t cublasCreate_v2(cublasHandle_t* h) {
  *h = reinterpret_cast<cublasHandle_t>(new CublasHandle);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
  delete reinterpret_cast<CublasHandle*>(h);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
  reinterpret_cast<CublasHandle*>(h)->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
// C = alpha op(A) op(B) + beta C, column-major, fp32 scalars and accumulation.
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType_t at, int lda, const void* B,
                            cudaDataType_t bt, int ldb, const void* beta, void* C, cudaDataType_t ct, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (compute != CUBLAS_COMPUTE_32F || m <= 0 || n <= 0 || k <= 0) return CUBLAS_STATUS_INVALID_VALUE;
  const Desc o{ta, tb};
  const Layout a{at, uint64_t(ta == CUBLAS_OP_N ? m : k), uint64_t(ta == CUBLAS_OP_N ? k : m), lda};
  const Layout b{bt, uint64_t(tb == CUBLAS_OP_N ? k : n), uint64_t(tb == CUBLAS_OP_N ? n : k), ldb};
  const Layout c{ct, uint64_t(m), uint64_t(n), ldc};
  if (!valid(&a) || !valid(&b) || !valid(&c) || at != bt) return CUBLAS_STATUS_INVALID_VALUE;
  return matmul(o, alpha, A, a, B, b, beta, C, c, C, c, reinterpret_cast<CublasHandle*>(h)->stream);
}

}  // extern "C"

// cuBLASLt GEMM behind a row-major interface, with the algorithm chosen once per shape.
// Row-major C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T.
// A and B share one type, C may differ (bf16 A/B with an fp32 C for mixed precision); the
// compute type is always CUBLAS_COMPUTE_32F with fp32 alpha/beta.
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>

#include "kernels/cuda/matmul.cuh"

namespace mt::cuda {

namespace {
CudaStatus check_blas(cublasStatus_t s, const char* call) {
  return s == CUBLAS_STATUS_SUCCESS ? CudaStatus{} : CudaStatus{call, int(s), true};
}
#define MT_BLAS_CALL(expr) MT_CUDA_TRY(check_blas((expr), #expr))

template <typename T>
constexpr cudaDataType_t data_type() {
  if constexpr (sizeof(T) == 4) return CUDA_R_32F;
  else return CUDA_R_16BF;
}

// (A/B type, C type, trans_a, trans_b, M, N, K, lda, ldb, ldc, alignment).
using Key = std::tuple<int, int, bool, bool, int, int, int, int, int, int, uint32_t>;

// Largest power of two (<= 256) dividing the address: cuBLASLt picks kernels for it.
uint32_t alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && (a % al) != 0) al >>= 1;
  return al;
}

// One cached matmul configuration: descriptors plus the heuristic's first algorithm.
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  void destroy() {
    if (op) cublasLtMatmulDescDestroy(op);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
  }
};
}  // namespace

struct GemmContext::Impl {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::map<Key, Plan> plans;
  ~Impl() {
    for (auto& [k, p] : plans) p.destroy();
    if (workspace) cudaFree(workspace);
    if (handle) cublasLtDestroy(handle);
  }
};

GemmContext::GemmContext() : impl_(std::make_unique<Impl>()) {}
GemmContext::~GemmContext() = default;

CudaStatus GemmContext::create(std::unique_ptr<GemmContext>& out, size_t workspace_bytes) {
  std::unique_ptr<GemmContext> c(new GemmContext());
  MT_BLAS_CALL(cublasLtCreate(&c->impl_->handle));
  MT_CUDA_CALL(cudaMalloc(&c->impl_->workspace, workspace_bytes));
  c->impl_->workspace_bytes = workspace_bytes;
  out = std::move(c);
  return {};
}

namespace {

// Column-major problem: D[m,n] = op(A') op(B'), A' = row-major B, B' = row-major A.
// dt: A and B; dt_c: C (and D, the same buffer).
CudaStatus make_plan(GemmContext::Impl& ctx, cudaDataType_t dt, cudaDataType_t dt_c, bool ta, bool tb, int M, int N,
                     int K, int lda, int ldb, int ldc, uint32_t align, Plan& p) {
  const cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N;  // applied to row-major B
  const cublasOperation_t opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;  // applied to row-major A
  MT_BLAS_CALL(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  MT_BLAS_CALL(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  MT_BLAS_CALL(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  // Stored shapes (column-major view of the row-major buffers).
  MT_BLAS_CALL(cublasLtMatrixLayoutCreate(&p.a, dt, tb ? K : N, tb ? N : K, ldb));
  MT_BLAS_CALL(cublasLtMatrixLayoutCreate(&p.b, dt, ta ? M : K, ta ? K : M, lda));
  MT_BLAS_CALL(cublasLtMatrixLayoutCreate(&p.c, dt_c, N, M, ldc));
  cublasLtMatmulPreference_t pref = nullptr;
  MT_BLAS_CALL(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = ctx.workspace_bytes;
  cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                          sizeof ws);
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof align);
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulAlgoGetHeuristic(ctx.handle, p.op, p.a, p.b, p.c, p.c, pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  MT_CUDA_TRY(check_blas(s, "cublasLtMatmulAlgoGetHeuristic"));
  if (found == 0) return CudaStatus{"cublasLtMatmulAlgoGetHeuristic (no algorithm)", int(CUBLAS_STATUS_NOT_SUPPORTED), true};
  p.algo = res.algo;
  return {};
}

}  // namespace

template <typename T, typename TC>
CudaStatus gemm(bool ta, bool tb, int M, int N, int K, float alpha, const T* A, int lda, const T* B, int ldb,
                float beta, TC* C, int ldc, GemmContext& gc, cudaStream_t stream) {
  if (M <= 0 || N <= 0) return {};
  if (K <= 0) return invalid_value("gemm: K must be positive");
  GemmContext::Impl& ctx = gc.impl();
  const uint32_t align = std::min(alignment(A), std::min(alignment(B), alignment(C)));
  const Key key{int(data_type<T>()), int(data_type<TC>()), ta, tb, M, N, K, lda, ldb, ldc, align};
  auto it = ctx.plans.find(key);
  if (it == ctx.plans.end()) {
    Plan p;
    CudaStatus s = make_plan(ctx, data_type<T>(), data_type<TC>(), ta, tb, M, N, K, lda, ldb, ldc, align, p);
    if (!s.ok()) {
      p.destroy();
      return s;
    }
    it = ctx.plans.emplace(key, p).first;
  }
  const Plan& p = it->second;
  clear_last_error();  // cuBLASLt launches kernels too: a stale error must not be charged to it
  MT_BLAS_CALL(cublasLtMatmul(ctx.handle, p.op, &alpha, B, p.a, A, p.b, &beta, C, p.c, C, p.c, &p.algo,
                              ctx.workspace, ctx.workspace_bytes, stream));
  return {};
}

#define MT_INSTANTIATE(T, TC)                                                                                \
  template CudaStatus gemm<T, TC>(bool, bool, int, int, int, float, const T*, int, const T*, int, float, TC*, int, \
                                  GemmContext&, cudaStream_t);
MT_INSTANTIATE(float, float)
MT_INSTANTIATE(__nv_bfloat16, __nv_bfloat16)
MT_INSTANTIATE(__nv_bfloat16, float)
#undef MT_INSTANTIATE

}  // namespace mt::cuda

// Dense layers and GEMM. gemm<float> runs the provider chosen at run time (OpenBLAS, oneDNN:
// kernels/gemm_provider.h), gemm<double> CBLAS when built with it; otherwise gemm_blocked: a
// packed, cache-blocked kernel with a register-tiled micro-kernel, parallel over row blocks of C.
// Every element of C is owned by one thread and accumulated in a fixed k order (deterministic).
#include "kernels/matmul.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/common.h"
#include "kernels/cpu/gemm_backends.h"

#ifdef MEGATRAIN_HAVE_BLAS
#include <cblas.h>
#endif

namespace mt::cpu {
namespace {

constexpr int kMB = 64;   // rows of C per task
constexpr int kKB = 128;  // depth of one packed panel
constexpr int kNB = 256;  // columns of one packed panel
using detail::kMR;  // micro-tile rows
using detail::kNR;  // micro-tile columns: 16 floats or 8 doubles

template <typename T>
void scale_c(int M, int N, T beta, T* C, int ldc) {
  if (beta == T(1)) return;
  MT_OMP(parallel for schedule(static) if (detail::worth_parallel(long(M) * N)))
  for (int i = 0; i < M; ++i) {
    T* c = C + long(i) * ldc;
    if (beta == T(0)) {
      std::fill(c, c + N, T(0));
    } else {
      for (int j = 0; j < N; ++j) c[j] *= beta;
    }
  }
}

// Bp[k][j] = op(B)(k0 + k, j0 + j), zero-padded to a multiple of NR columns.
template <typename T>
void pack_b(T* Bp, int ldp, bool trans_b, const T* B, int ldb, int k0, int kb, int j0, int nb) {
  for (int k = 0; k < kb; ++k) {
    T* dst = Bp + long(k) * ldp;
    if (trans_b) {
      for (int j = 0; j < nb; ++j) dst[j] = B[long(j0 + j) * ldb + k0 + k];
    } else {
      const T* src = B + long(k0 + k) * ldb + j0;
      std::copy(src, src + nb, dst);
    }
    std::fill(dst + nb, dst + ldp, T(0));
  }
}

// Ap[i][k] = alpha * op(A)(i0 + i, k0 + k), zero-padded to a multiple of MR rows.
template <typename T>
void pack_a(T* Ap, int mb_pad, bool trans_a, const T* A, int lda, T alpha, int i0, int mb, int k0,
            int kb) {
  for (int i = 0; i < mb_pad; ++i) {
    T* dst = Ap + long(i) * kb;
    if (i >= mb) {
      std::fill(dst, dst + kb, T(0));
    } else if (trans_a) {
      for (int k = 0; k < kb; ++k) dst[k] = alpha * A[long(k0 + k) * lda + i0 + i];
    } else {
      const T* src = A + long(i0 + i) * lda + k0;
      for (int k = 0; k < kb; ++k) dst[k] = alpha * src[k];
    }
  }
}

// C[0:mr, 0:nr] += Ap[0:MR, :] @ Bp[:, 0:NR] (only the valid mr x nr corner is written).
template <typename T>
void micro_kernel(const T* Ap, const T* Bp, int ldp, int kb, T* C, int ldc, int mr, int nr) {
  constexpr int NR = kNR<T>;
  if (mr == kMR && nr == NR) {
    detail::micro_tile<true>(Ap, kb, Bp, ldp, kb, C, ldc);
    return;
  }
  T acc[kMR * NR];
  detail::micro_tile<false>(Ap, kb, Bp, ldp, kb, acc, NR);
  for (int r = 0; r < mr; ++r)
    for (int j = 0; j < nr; ++j) C[long(r) * ldc + j] += acc[r * NR + j];
}

template <typename T>
void gemm_panel(bool trans_a, int M, int k0, int kb, int j0, int nb, T alpha, const T* A, int lda,
                const T* Bp, int ldp, T* C, int ldc) {
  const int row_blocks = (M + kMB - 1) / kMB;
  MT_OMP(parallel if (detail::worth_parallel(long(M) * kb * nb)))
  {
    std::vector<T> Ap(size_t(kMB) * kKB);
    MT_OMP(for schedule(static))
    for (int rb = 0; rb < row_blocks; ++rb) {
      const int i0 = rb * kMB, mb = std::min(kMB, M - i0);
      const int mb_pad = (mb + kMR - 1) / kMR * kMR;
      pack_a(Ap.data(), mb_pad, trans_a, A, lda, alpha, i0, mb, k0, kb);
      for (int i = 0; i < mb_pad; i += kMR) {
        for (int j = 0; j < nb; j += kNR<T>) {
          micro_kernel(Ap.data() + long(i) * kb, Bp + j, ldp, kb, C + long(i0 + i) * ldc + j0 + j,
                       ldc, std::min(kMR, mb - i), std::min(kNR<T>, nb - j));
        }
      }
    }
  }
}

}  // namespace

template <typename T>
void gemm_blocked(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda,
                  const T* B, int ldb, T beta, T* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  scale_c(M, N, beta, C, ldc);
  if (K <= 0 || alpha == T(0)) return;
  const int ldp = kNB;
  std::vector<T> Bp(size_t(kKB) * ldp);
  for (int j0 = 0; j0 < N; j0 += kNB) {
    const int nb = std::min(kNB, N - j0);
    for (int k0 = 0; k0 < K; k0 += kKB) {
      const int kb = std::min(kKB, K - k0);
      pack_b(Bp.data(), ldp, trans_b, B, ldb, k0, kb, j0, nb);
      gemm_panel(trans_a, M, k0, kb, j0, nb, alpha, A, lda, Bp.data(), ldp, C, ldc);
    }
  }
}

namespace {

// The provider chosen at run time (gemm_provider.cc); false: run gemm_blocked.
bool provider_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                   const float* B, int ldb, float beta, float* C, int ldc) {
  switch (detail::sgemm_backend()) {
#ifdef MEGATRAIN_HAVE_BLAS
    case detail::Sgemm::kOpenblas:
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                  M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      return true;
#endif
#ifdef MEGATRAIN_HAVE_ONEDNN
    case detail::Sgemm::kOnednn:
      return detail::onednn_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
    default:
      return false;
  }
}

// double (the gradient checks' reference precision): CBLAS when built with it.
bool provider_gemm(bool ta, bool tb, int M, int N, int K, double alpha, const double* A, int lda,
                   const double* B, int ldb, double beta, double* C, int ldc) {
#ifdef MEGATRAIN_HAVE_BLAS
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
  return true;
#else
  return false;
#endif
}

}  // namespace

template <typename T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda,
          const T* B, int ldb, T beta, T* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // CBLAS would reject the degenerate leading dimensions; C = beta * C.
    scale_c(M, N, beta, C, ldc);
    return;
  }
  if (provider_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) return;
  gemm_blocked(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC) {
  if (bias != nullptr) {
    MT_OMP(parallel for schedule(static) if (detail::worth_parallel(long(N) * OC)))
    for (int n = 0; n < N; ++n) std::copy(bias, bias + OC, out + long(n) * OC);
  }
  gemm(false, true, N, OC, C, T(1), inp, C, weight, C, bias != nullptr ? T(1) : T(0), out, OC);
}

template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int N, int C, int OC) {
  if (dinp != nullptr) gemm(false, false, N, C, OC, T(1), dout, OC, weight, C, T(1), dinp, C);
  if (dweight != nullptr) gemm(true, false, OC, C, N, T(1), dout, OC, inp, C, T(1), dweight, C);
  if (dbias == nullptr) return;
  constexpr int kCols = 64;  // column chunk per task; rows summed in order within it
  const int chunks = (OC + kCols - 1) / kCols;
  MT_OMP(parallel for schedule(static) if (detail::worth_parallel(long(N) * OC)))
  for (int ch = 0; ch < chunks; ++ch) {
    const int o0 = ch * kCols, o1 = std::min(OC, o0 + kCols);
    T acc[kCols] = {};
    for (int n = 0; n < N; ++n) {
      const T* row = dout + long(n) * OC;
      for (int o = o0; o < o1; ++o) acc[o - o0] += row[o];
    }
    for (int o = o0; o < o1; ++o) dbias[o] += acc[o - o0];
  }
}

#define MT_INSTANTIATE(T)                                                                        \
  template void gemm<T>(bool, bool, int, int, int, T, const T*, int, const T*, int, T, T*, int); \
  template void gemm_blocked<T>(bool, bool, int, int, int, T, const T*, int, const T*, int, T,   \
                                T*, int);                                                        \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int, int, int);              \
  template void matmul_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int);
MT_INSTANTIATE(float)
MT_INSTANTIATE(double)
#undef MT_INSTANTIATE

}  // namespace mt::cpu

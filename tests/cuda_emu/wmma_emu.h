// nvcuda::wmma on the CPU (included by cuda_emu.h): every lane's fragment holds the whole tile,
// row-major, so loads and stores need no other lane, and a kernel that probes the accumulator's
// layout (attention_mma_fwd.cu) learns this one. mma_sync is computed once per warp
// (mt_emu::warp_memo_*) and products are summed in fp32 in k order, as one possible order of the
// tensor core's.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static constexpr int rows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int cols = std::is_same_v<Use, matrix_a> ? K : N;
  static constexpr int num_elements = rows * cols;
  T x[num_elements];
  T& at(int r, int c) { return x[r * cols + c]; }
  const T& at(int r, int c) const { return x[r * cols + c]; }
};

// WMMA's rules for a tile in memory: its address 256-bit aligned, its leading dimension a
// multiple of 16 bytes (8 bf16 or 4 floats).
template <typename T>
void check_tile(const T* p, unsigned ld) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0) ::mt_emu::device_error("a WMMA tile address not 256-bit aligned");
  if ((ld * sizeof(T)) % 16 != 0) ::mt_emu::device_error("a WMMA leading dimension not a multiple of 16 bytes");
}

inline float to_float(float v) { return v; }
inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename Use, int M, int N, int K, typename T, typename L>
void fill_fragment(fragment<Use, M, N, K, T, L>& f, T v) {
  for (auto& e : f.x) e = v;
}

template <typename Use, int M, int N, int K, typename T, typename L>
void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const T* p, unsigned ld) {
  using F = fragment<Use, M, N, K, T, L>;
  constexpr bool col = std::is_same_v<L, col_major>;
  check_tile(p, ld);
  for (int r = 0; r < F::rows; ++r)
    for (int c = 0; c < F::cols; ++c) f.at(r, c) = col ? p[size_t(c) * ld + r] : p[size_t(r) * ld + c];
}

template <int M, int N, int K, typename T>
void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const T* p, unsigned ld, layout_t layout) {
  check_tile(p, ld);
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c) f.at(r, c) = layout == mem_col_major ? p[size_t(c) * ld + r] : p[size_t(r) * ld + c];
}

// Each lane writes its share only (element e by lane e % 32), so a lane that reads the tile back
// before the warp has synchronised sees another lane's part unwritten, as on the device.
template <int M, int N, int K, typename T>
void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T>& f, unsigned ld, layout_t layout) {
  check_tile(p, ld);
  const int lane = ::mt_emu::lane_id();
  for (int e = lane; e < M * N; e += 32) {
    const int r = e / N, c = e % N;
    (layout == mem_col_major ? p[size_t(c) * ld + r] : p[size_t(r) * ld + c]) = f.at(r, c);
  }
}

template <int M, int N, int K, typename TA, typename LA, typename LB>
void mma_sync(fragment<accumulator, M, N, K, float>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
              const fragment<matrix_b, M, N, K, TA, LB>& b, const fragment<accumulator, M, N, K, float>& c) {
  struct {
    fragment<matrix_a, M, N, K, TA, LA> a;
    fragment<matrix_b, M, N, K, TA, LB> b;
    fragment<accumulator, M, N, K, float> c;
  } in{a, b, c};
  fragment<accumulator, M, N, K, float> out;
  if (::mt_emu::warp_memo_find(&in, sizeof in, &out, sizeof out)) {
    d = out;
    return;
  }
  float fa[M][K], fb[K][N];  // the operands in fp32
  for (int r = 0; r < M; ++r)
    for (int k = 0; k < K; ++k) fa[r][k] = to_float(a.at(r, k));
  for (int k = 0; k < K; ++k)
    for (int n = 0; n < N; ++n) fb[k][n] = to_float(b.at(k, n));
  for (int r = 0; r < M; ++r) {
    for (int n = 0; n < N; ++n) out.at(r, n) = c.at(r, n);
    for (int k = 0; k < K; ++k)  // each output summed in k order; the n loop vectorises
      for (int n = 0; n < N; ++n) out.at(r, n) += fa[r][k] * fb[k][n];
  }
  ::mt_emu::warp_memo_put(&in, sizeof in, &out, sizeof out);
  d = out;
}

}  // namespace nvcuda::wmma

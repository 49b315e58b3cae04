// Shared helpers of the CUDA tests: skip without a device, device buffers poisoned with NaN
// (all-ones bytes) before every run, seeded data, and comparisons in which NaN never passes.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <cstdlib>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "kernels/bf16.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_cudnn.cuh"

#define MT_REQUIRE_CUDA()                                                           \
  do {                                                                              \
    if (!::mt::cuda_available()) GTEST_SKIP() << "no CUDA device: " << ::mt::cuda_describe(); \
  } while (0)

// A test of the cuDNN path: skipped in a build without cuDNN, unless MEGATRAIN_REQUIRE_CUDNN is
// set (scripts/gpu_check.sh sets it), where that is a failure: a GPU run whose cuDNN tests all
// skipped read as passed.
#define MT_REQUIRE_CUDNN_BUILD()                                                              \
  do {                                                                                        \
    if (!::mt::cuda::cudnn_built()) {                                                         \
      if (std::getenv("MEGATRAIN_REQUIRE_CUDNN")) FAIL() << ::mt::cuda::cudnn_describe();     \
      GTEST_SKIP() << ::mt::cuda::cudnn_describe();                                           \
    }                                                                                         \
  } while (0)

namespace mt::cudatest {

// The device is the CUDA emulation on the CPU (tests/cuda_emu), ~10^4 times slower than a GPU:
// a test's longest shape, where it adds no code path to its shorter ones, is for real devices.
inline bool emulated() { return ::mt::cuda_describe().find("emulat") != std::string::npos; }

template <typename T>
class DeviceBuf {
 public:
  explicit DeviceBuf(size_t n) : n_(n) {
    EXPECT_EQ(cudaSuccess, cudaMalloc(&p_, std::max<size_t>(n, 1) * sizeof(T)));
    poison();
  }
  explicit DeviceBuf(const std::vector<T>& v) : DeviceBuf(v.size()) { upload(v); }
  ~DeviceBuf() { cudaFree(p_); }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
  void poison() { EXPECT_EQ(cudaSuccess, cudaMemset(p_, 0xff, std::max<size_t>(n_, 1) * sizeof(T))); }  // NaN
  void upload(const std::vector<T>& v) {
    ASSERT_EQ(v.size(), n_);
    EXPECT_EQ(cudaSuccess, cudaMemcpy(p_, v.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> v(n_);
    EXPECT_EQ(cudaSuccess, cudaDeviceSynchronize());
    EXPECT_EQ(cudaSuccess, cudaMemcpy(v.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_;
};

inline std::vector<float> random_floats(size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = float(d(rng));
  return v;
}

// bf16 storage of `n` random values, and the same values in double for the reference.
struct Bf {
  std::vector<bf16> h;
  std::vector<double> d;
};
inline Bf rnd(size_t n, uint32_t seed, double lo = -1, double hi = 1) {
  const auto f = random_floats(n, seed, lo, hi);
  Bf b;
  b.h.resize(n);
  b.d.resize(n);
  for (size_t i = 0; i < n; ++i) b.h[i] = float_to_bf16(f[i]), b.d[i] = bf16_to_float(b.h[i]);
  return b;
}
inline __nv_bfloat16* nv(const DeviceBuf<bf16>& b) { return reinterpret_cast<__nv_bfloat16*>(b.get()); }
inline std::vector<float> got(const DeviceBuf<bf16>& b) {
  const auto h = b.download();
  std::vector<float> f(h.size());
  for (size_t i = 0; i < h.size(); ++i) f[i] = bf16_to_float(h[i]);
  return f;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// |got - ref| <= rtol * (|ref| + rms(ref)) + atol for every element, NaN/Inf failing: an
// elementwise relative check that does not demand relative accuracy of values far below the
// tensor's own scale (cancellation). Reports the first few failures (located by `where(i)`
// when given, e.g. "b=1 h=3 t=516 d=7") and the worst error. `slack` (empty, or one per element)
// widens each element's tolerance by a bound derived for it (attention_mma_test.cc).
inline void expect_close(const std::vector<float>& got, const std::vector<double>& ref, double rtol, const std::string& what,
                         double atol = 0, const std::function<std::string(size_t)>& where = nullptr,
                         const std::vector<double>& slack = {}) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double ss = 0;
  for (double r : ref) ss += r * r;
  const double rms = ref.empty() ? 0 : std::sqrt(ss / double(ref.size()));
  int bad = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - ref[i]);
    const double tol = rtol * (std::fabs(ref[i]) + rms) + atol + (slack.empty() ? 0 : slack[i]);
    if (!(err <= tol)) {  // written so that NaN fails
      if (++bad <= 5)
        ADD_FAILURE() << what << "[" << i << "]" << (where ? " (" + where(i) + ")" : "") << ": got " << got[i]
                      << ", want " << ref[i] << " (tol " << tol << ")";
    }
    if (std::isfinite(err)) worst = std::max(worst, rms > 0 ? err / rms : err);
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements out of tolerance; worst error / rms "
                    << worst;
}

inline void expect_bitwise(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0 && ++bad <= 5)
      ADD_FAILURE() << what << "[" << i << "]: " << a[i] << " vs " << b[i];
  EXPECT_EQ(bad, 0) << what << ": not bit-identical";
}

// Selects the bf16 attention kernel for the scope, restoring the previous choice.
class AttentionKernelScope {
 public:
  explicit AttentionKernelScope(cuda::AttentionKernel k) : saved_(cuda::attention_kernel()) {
    cuda::set_attention_kernel(k);
  }
  ~AttentionKernelScope() { cuda::set_attention_kernel(saved_); }
  AttentionKernelScope(const AttentionKernelScope&) = delete;
  AttentionKernelScope& operator=(const AttentionKernelScope&) = delete;

 private:
  cuda::AttentionKernel saved_;
};

inline cudaStream_t test_stream() { return cudaStreamPerThread; }

}  // namespace mt::cudatest

#define MT_EXPECT_CUDA_OK(expr)                                    \
  do {                                                             \
    const ::mt::cuda::CudaStatus mt_s_ = (expr);                   \
    ASSERT_TRUE(mt_s_.ok()) << ::mt::cuda::describe(mt_s_);        \
  } while (0)

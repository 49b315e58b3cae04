// Shared by the bf16 op-table tests (bf16_ops_test.cc, bf16_moe_ops_test.cc): the CUDA bf16 table
// against the CPU bf16 table on identical inputs, and the comparisons (see bf16_ops_test.cc's
// header for the tolerances' reasoning).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "tests/cuda/cuda_test_util.h"

namespace mt::bf16test {

using cudatest::DeviceBuf;

inline std::vector<bf16> rnd16(size_t n, uint32_t seed, double lo = -1, double hi = 1) {
  const auto f = cudatest::random_floats(n, seed, lo, hi);
  std::vector<bf16> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = float_to_bf16(f[i]);
  return b;
}

inline double rms(const std::vector<double>& v) {
  double ss = 0;
  for (double x : v) ss += x * x;
  return v.empty() ? 0 : std::sqrt(ss / double(v.size()));
}

// One bf16 ulp at |x|: 2^(e - 8) for |x| in [2^(e-1), 2^e) (8 significant bits).
inline double bf16_ulp(double x) {
  if (x == 0 || !std::isfinite(x)) return 0;
  int e = 0;
  std::frexp(x, &e);
  return std::ldexp(1.0, e - 8);
}

// |got - ref| <= ulps * ulp(ref) + slack * rms(ref) for every element; NaN fails.
inline void expect_bf16_near(const std::vector<bf16>& got, const std::vector<bf16>& ref, int ulps, double slack,
                      const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  std::vector<double> r(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) r[i] = bf16_to_float(ref[i]);
  const double abs_slack = slack * rms(r);
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = bf16_to_float(got[i]), err = std::fabs(g - r[i]);
    const double tol = ulps * bf16_ulp(r[i]) + abs_slack;
    if (!(err <= tol) && ++bad <= 5)  // written so that NaN fails
      ADD_FAILURE() << what << "[" << i << "]: got " << g << ", want " << r[i] << " (tol " << tol << ")";
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements beyond " << ulps
                    << " bf16 ulps + " << slack << " rms";
}

inline void expect_bits(const std::vector<bf16>& got, const std::vector<bf16>& ref, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i].bits != ref[i].bits && ++bad <= 5)
      ADD_FAILURE() << what << "[" << i << "]: bits " << got[i].bits << " vs " << ref[i].bits;
  EXPECT_EQ(bad, 0) << what << ": not bit-identical";
}

// fp32 outputs: |got - ref| <= rtol * (|ref| + rms(ref)), NaN failing.
inline void expect_f32_near(const std::vector<float>& got, const std::vector<float>& ref, double rtol,
                     const std::string& what) {
  cudatest::expect_close(got, std::vector<double>(ref.begin(), ref.end()), rtol, what);
}

// The CUDA bf16 table on a fresh backend, the CPU bf16 table as the reference.
class CudaBf16Ops : public ::testing::Test {
 protected:
  void SetUp() override {
    MT_REQUIRE_CUDA();
    auto b = make_cuda_backend({});
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    backend_ = std::move(b).value();
  }
  const Ops<bf16>& gpu() { return backend_->ops<bf16>(); }
  const Ops<bf16>& cpu() { return cpu_ops<bf16>(); }
  // The test buffers are filled on the legacy default stream; the backend's compute stream is
  // non-blocking, so the device settles before an op is enqueued.
  static void settle() { ASSERT_EQ(cudaSuccess, cudaDeviceSynchronize()); }
  // After the ops: the device has run them (DeviceBuf::download synchronises) and none failed.
  void expect_no_device_error() {
    ASSERT_EQ(cudaSuccess, cudaDeviceSynchronize());
    EXPECT_TRUE(backend_->error().ok()) << backend_->error().to_string();
  }

  std::unique_ptr<Backend> backend_;
};

}  // namespace mt::bf16test

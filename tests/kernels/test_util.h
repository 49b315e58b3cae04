// Shared helpers for the kernel tests: seeded random data and central-difference grad checks.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace mt::test {

// Runs the enclosing scope with one OpenMP thread (the kernels give the same bits for any
// thread count; the thousands of tiny finite-difference calls are just faster serially).
class ScopedSerial {
 public:
#ifdef _OPENMP
  ScopedSerial() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~ScopedSerial() { omp_set_num_threads(saved_); }

 private:
  int saved_;
#endif
};

template <typename T = double>
std::vector<T> random_vec(size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = T(dist(rng));
  return v;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Compares grad[i] with the central difference of f() w.r.t. x[i] (x is perturbed in place
// and restored). Checks at most max_checks coordinates, spread evenly over x.
inline void expect_grad_matches(std::vector<double>& x, const std::vector<double>& grad,
                                const std::function<double()>& f, const char* what,
                                size_t max_checks = 100000, double rel_tol = 1e-6) {
  ASSERT_EQ(x.size(), grad.size()) << what;
  const double h = 1e-5;
  const size_t n = x.size();
  const size_t stride = std::max<size_t>(1, n / std::max<size_t>(1, max_checks));
  int failures = 0;
  ScopedSerial serial;  // the analytic gradient was computed with the default thread count
  for (size_t i = 0; i < n; i += stride) {
    const double saved = x[i];
    x[i] = saved + h;
    const double fp = f();
    x[i] = saved - h;
    const double fm = f();
    x[i] = saved;
    const double num = (fp - fm) / (2 * h);
    const double tol = rel_tol * std::max(std::abs(num), std::abs(grad[i])) + 1e-8;
    if (std::abs(num - grad[i]) > tol && ++failures <= 5)
      ADD_FAILURE() << what << "[" << i << "]: analytic " << grad[i] << " numeric " << num;
  }
  EXPECT_EQ(failures, 0) << what;
}

}  // namespace mt::test

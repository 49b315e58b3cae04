// Run-time CPU dispatch: the ISA variants of the vectorised kernels give the same bits (so a
// job's results do not depend on which CPU of a fleet ran it), and the GEMM provider report,
// including the generic-kernel fallback, checked in child processes that start with
// OPENBLAS_CORETYPE=Prescott (what OpenBLAS picks on a CPU whose model it cannot name).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/cpu/common.h"
#include "kernels/cpu_info.h"
#include "kernels/gemm_provider.h"
#include "tests/kernels/test_util.h"

namespace mt::cpu {
namespace {

class ScopedIsa {
 public:
  explicit ScopedIsa(Isa isa) : saved_(kernel_isa()), ok_(force_kernel_isa(isa)) {}
  ~ScopedIsa() { force_kernel_isa(saved_); }
  bool ok() const { return ok_; }

 private:
  Isa saved_;
  bool ok_;
};

template <typename S>
struct AdamWRun {
  std::vector<float> p;
  std::vector<S> m, v;
  std::vector<bf16> shadow;
};

// Three steps of AdamW on the given ISA variant; n is not a multiple of any vector width. The
// shadow starts 3 elements into its buffer (not on a cache line: the AVX-512 variant streams it
// out in whole lines) between guard elements that must stay as they are.
constexpr size_t kShadowAt = 3, kGuard = 8;
template <typename S>
AdamWRun<S> run_adamw(Isa isa, bool with_shadow, size_t n) {
  ScopedIsa use(isa);
  EXPECT_TRUE(use.ok());
  AdamWRun<S> r{test::random_vec<float>(n, 1), std::vector<S>(n), std::vector<S>(n),
                std::vector<bf16>(n + kShadowAt + kGuard, bf16{0xABCD})};
  AdamWParams ap;
  ap.lr = 3e-3f;
  ap.weight_decay = 0.1f;
  ap.grad_scale = 0.7f;
  for (long step = 1; step <= 3; ++step) {
    ap.step = step;
    const auto gf = test::random_vec<float>(n, uint32_t(20 + step), -3.0, 3.0);
    std::vector<S> g(n);
    for (size_t i = 0; i < n; ++i) g[i] = from_float<S>(gf[i]);
    adamw_update<S>(r.p.data(), g.data(), r.m.data(), r.v.data(), with_shadow ? r.shadow.data() + kShadowAt : nullptr,
                    n, ap);
  }
  for (size_t i = 0; i < r.shadow.size(); ++i)
    if (i < kShadowAt || i >= kShadowAt + n || !with_shadow) {
      EXPECT_EQ(r.shadow[i].bits, 0xABCD) << "guard " << i;
    }
  return r;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST(CpuIsa, AdamWVariantsGiveIdenticalBits) {
  if (!isa_supported(Isa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512: one variant only";
  for (size_t n : {size_t(1037), size_t(5003)})  // one block of the streamed shadow; three
    for (bool shadow : {false, true}) {
      const auto a = run_adamw<float>(Isa::kBaseline, shadow, n), b = run_adamw<float>(Isa::kAvx512, shadow, n);
      EXPECT_TRUE(same_bits(a.p, b.p) && same_bits(a.m, b.m) && same_bits(a.v, b.v)) << "fp32, shadow " << shadow;
      EXPECT_TRUE(same_bits(a.shadow, b.shadow)) << "fp32, n " << n;
      const auto c = run_adamw<bf16>(Isa::kBaseline, shadow, n), d = run_adamw<bf16>(Isa::kAvx512, shadow, n);
      EXPECT_TRUE(same_bits(c.p, d.p) && same_bits(c.m, d.m) && same_bits(c.v, d.v)) << "bf16, shadow " << shadow;
      EXPECT_TRUE(same_bits(c.shadow, d.shadow)) << "bf16, n " << n;
      for (size_t i = 0; shadow && i < n; ++i)  // and the shadow is the masters rounded
        ASSERT_EQ(b.shadow[kShadowAt + i].bits, float_to_bf16(b.p[i]).bits) << i;
    }
}

// exp_shifted's vector lanes and its scalar tail (fast_exp) agree bit for bit, so the result
// does not depend on the vector width or where the tail starts; -inf gives exactly 0.
TEST(CpuIsa, ExpShiftedVariantsAndScalarTailGiveIdenticalBits) {
  std::vector<float> x = test::random_vec<float>(1000, 5, -100.0, 100.0);
  x[3] = -std::numeric_limits<float>::infinity();
  x[17] = -87.5f;
  x[40] = 88.5f;
  for (Isa isa : {Isa::kBaseline, Isa::kAvx512}) {
    ScopedIsa use(isa);
    if (!use.ok()) continue;
    for (int n : {1, 7, 8, 15, 16, 17, 33, 1000}) {
      std::vector<float> s(x.begin(), x.begin() + n);
      detail::exp_shifted(s.data(), n, 1.5f);
      for (int j = 0; j < n; ++j) {
        const float want = detail::fast_exp(x[size_t(j)] - 1.5f);
        ASSERT_EQ(std::memcmp(&s[size_t(j)], &want, 4), 0)
            << isa_name(isa) << " n " << n << " j " << j << ": " << s[size_t(j)] << " vs " << want;
      }
    }
  }
  EXPECT_EQ(detail::fast_exp(-std::numeric_limits<float>::infinity()), 0.0f);
}

TEST(CpuIsa, ForcingAnUnsupportedVariantChangesNothing) {
  const Isa before = kernel_isa();
  if (isa_supported(Isa::kAvx512)) GTEST_SKIP() << "AVX-512 is supported here";
  EXPECT_FALSE(force_kernel_isa(Isa::kAvx512));
  EXPECT_EQ(kernel_isa(), before);
}

TEST(GemmProvider, ReportsProviderAndKernel) {
  const GemmProvider& p = gemm_provider();
  EXPECT_FALSE(p.name.empty());
  EXPECT_FALSE(p.kernel.empty());
  EXPECT_NE(gemm_provider_line().find(p.summary()), std::string::npos) << gemm_provider_line();
  const auto linked = linked_gemm_providers();
  EXPECT_NE(std::find(linked.begin(), linked.end(), p.name), linked.end()) << p.name;
  EXPECT_EQ(p.fallback, !gemm_fallback_warning().empty());
}

// The child half of the tests below: prints the report between markers, then stops.
TEST(GemmProviderChild, Print) {
  if (std::getenv("MT_GEMM_PROVIDER_CHILD") == nullptr) GTEST_SKIP() << "runs only as a child process";
  const GemmProvider& p = gemm_provider();
  std::printf("<<<name=%s kernel=%s fallback=%d line=%s>>>\n", p.name.c_str(), p.kernel.c_str(),
              int(p.fallback), gemm_provider_line().c_str());
}

// This test binary, re-run with `env` prepended, filtered to the child; its whole output.
std::string run_child(const std::string& env) {
  std::array<char, 4096> self{};
  const ssize_t len = readlink("/proc/self/exe", self.data(), self.size() - 1);
  if (len <= 0) return "";
  const std::string cmd = "env " + env + " MT_GEMM_PROVIDER_CHILD=1 '" + std::string(self.data(), size_t(len)) +
                          "' --gtest_filter=GemmProviderChild.Print 2>&1";
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return "";
  std::array<char, 4096> buf{};
  size_t got;
  while ((got = std::fread(buf.data(), 1, buf.size(), f)) > 0) out.append(buf.data(), got);
  pclose(f);
  return out;
}

bool openblas_linked() {
  const auto p = linked_gemm_providers();
  return gemm_provider().name == "openblas" || std::find(p.begin(), p.end(), "openblas") != p.end();
}
bool onednn_linked() {
  const auto p = linked_gemm_providers();
  return std::find(p.begin(), p.end(), "onednn") != p.end();
}

// OpenBLAS forced to its generic kernel on an AVX2 CPU: the report says so, and a warning is
// printed on stderr at the first GEMM, without being asked for.
TEST(GemmProvider, GenericOpenblasKernelIsReportedAndWarned) {
  if (!openblas_linked()) GTEST_SKIP() << "built without OpenBLAS";
  if (!cpu_info().avx2) GTEST_SKIP() << "the CPU has no AVX2: Prescott is not a fallback here";
  const std::string out = run_child("OPENBLAS_CORETYPE=Prescott MEGATRAIN_GEMM=openblas");
  EXPECT_NE(out.find("<<<name=openblas kernel=Prescott fallback=1"), std::string::npos) << out;
  EXPECT_NE(out.find("megatrain: WARNING: the fp32 GEMM runs a generic kernel (openblas"), std::string::npos) << out;
}

// Left to choose, the provider steps around OpenBLAS's generic kernel when oneDNN is linked,
// and says which kernel it passed over; without oneDNN it keeps OpenBLAS and warns.
TEST(GemmProvider, GenericOpenblasKernelIsAvoidedWhenOneDnnIsLinked) {
  if (!openblas_linked()) GTEST_SKIP() << "built without OpenBLAS";
  if (!cpu_info().avx2) GTEST_SKIP() << "the CPU has no AVX2: Prescott is not a fallback here";
  const std::string out = run_child("OPENBLAS_CORETYPE=Prescott");
  if (onednn_linked()) {
    EXPECT_NE(out.find("<<<name=onednn"), std::string::npos) << out;
    EXPECT_NE(out.find("fallback=0"), std::string::npos) << out;
    EXPECT_NE(out.find("openblas 0.3"), std::string::npos) << out;
    EXPECT_NE(out.find("Prescott is a generic kernel on this CPU; using oneDNN"), std::string::npos) << out;
  } else {
    EXPECT_NE(out.find("fallback=1"), std::string::npos) << out;
    EXPECT_NE(out.find("WARNING"), std::string::npos) << out;
  }
}

// A misspelt override is not silently dropped: the report and stderr say it was ignored.
TEST(GemmProvider, UnknownOverrideIsReportedNotObeyed) {
  const std::string out = run_child("MEGATRAIN_GEMM=mkl MEGATRAIN_GEMM_BF16=sbgemm");
  EXPECT_NE(out.find("MEGATRAIN_GEMM=mkl names no provider in this build; ignored"), std::string::npos) << out;
  EXPECT_NE(out.find("MEGATRAIN_GEMM_BF16=sbgemm names no provider in this build; ignored"), std::string::npos) << out;
  EXPECT_NE(out.find("<<<name=" + gemm_provider().name), std::string::npos) << out;
}

}  // namespace
}  // namespace mt::cpu

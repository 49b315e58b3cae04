// megatrain-bench as a user runs it: every result names the CPU and the kernels it ran on, the
// generic-kernel fallback shows in the JSON and on stderr, cpu-gemm reports each provider
// (deterministic), and bad flags are refused.
#include "kernels/gemm_provider.h"
#include "tests/cli/cli_fixture.h"
#include "tests/test_paths.h"

namespace mt::cli::testing {
namespace {

RunResult bench(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {}) {
  std::vector<std::string> argv = {mt::testing_util::megatrain_bench()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, env);
}

TEST(BenchReport, EveryResultCarriesCpuAndKernels) {
  RunResult r = bench({"sgemm", "--n", "32", "--reps", "1", "--json"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  const auto lines = r.json_lines();
  ASSERT_EQ(lines.size(), 1u) << describe(r);
  const Json& j = lines[0];
  ASSERT_NE(j.find("cpu"), nullptr) << r.out;
  for (const char* k : {"model", "avx2", "avx512f", "avx512_bf16", "amx_bf16"})
    EXPECT_NE(j.find("cpu")->find(k), nullptr) << k << ": " << r.out;
  for (const char* k : {"gemm_provider", "gemm_kernel", "gemm_bf16_provider", "kernel_isa"}) {
    ASSERT_NE(j.find(k), nullptr) << k << ": " << r.out;
    EXPECT_FALSE(j.find(k)->as_string().empty()) << k;
  }
  ASSERT_NE(j.find("gemm_fallback"), nullptr);
  EXPECT_TRUE(j.find("gemm_fallback")->is_bool());
}

// OpenBLAS held to its generic Prescott kernel (what it picks on a CPU model it cannot name).
TEST(BenchReport, GenericKernelIsImpossibleToMiss) {
  RunResult r = bench({"sgemm", "--n", "32", "--reps", "1", "--json"},
                      {{"OPENBLAS_CORETYPE", "Prescott"}, {"MEGATRAIN_GEMM", "openblas"}});
  ASSERT_EQ(r.rc, 0) << describe(r);
  const auto lines = r.json_lines();
  ASSERT_EQ(lines.size(), 1u);
  if (lines[0].find("gemm_provider")->as_string().rfind("openblas", 0) != 0)
    GTEST_SKIP() << "built without OpenBLAS";
  if (!lines[0].find("cpu")->find("avx2")->as_bool()) GTEST_SKIP() << "no AVX2: Prescott is no fallback";
  EXPECT_EQ(lines[0].find("gemm_kernel")->as_string(), "Prescott");
  EXPECT_TRUE(lines[0].find("gemm_fallback")->as_bool()) << r.out;
  EXPECT_NE(r.err.find("WARNING: the fp32 GEMM runs a generic kernel"), std::string::npos) << r.err;
}

TEST(BenchReport, CpuGemmReportsEveryProviderDeterministic) {
  RunResult r = bench({"cpu-gemm", "--tokens", "67", "--c", "33", "--oc", "130", "--reps", "1", "--json"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  const auto lines = r.json_lines();
  int fp32 = 0, bf16 = 0;
  for (const Json& j : lines) {
    EXPECT_EQ(j.find("suite")->as_string(), "cpu-gemm");
    EXPECT_TRUE(j.find("deterministic")->as_bool()) << j.dump();
    EXPECT_GT(j.find("gflops")->as_double(), 0.0) << j.dump();
    (j.find("dtype")->as_string() == "bf16" ? bf16 : fp32)++;
  }
  // One line per provider linked into this build (the bench links the same kernels).
  EXPECT_EQ(size_t(fp32), cpu::linked_gemm_providers().size()) << r.out;
  EXPECT_EQ(size_t(bf16), cpu::linked_gemm_bf16_providers().size()) << r.out;
}

TEST(BenchReport, CpuGemmRefusesBadFlags) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--tokens", "0"}, {"--c", "1e9"}, {"--dtype", "fp16"}, {"--providers", "some"}, {"--size", "3"}}) {
    std::vector<std::string> argv = {"cpu-gemm"};
    argv.insert(argv.end(), args.begin(), args.end());
    RunResult r = bench(argv);
    EXPECT_EQ(r.rc, 2) << args[0] << " " << args[1] << ": " << describe(r);
  }
}

}  // namespace
}  // namespace mt::cli::testing

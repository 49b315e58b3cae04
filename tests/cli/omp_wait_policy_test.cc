// Our binaries run OpenMP with the passive wait policy unless told otherwise (docs/PERF.md: the
// default spin made tiny steps 30x slower beside another OpenMP process). megatrain-bench reports
// the policy it ran under; megatrain and megatraind share the same first line of main().
#include "tests/cli/cli_fixture.h"
#include "tests/test_paths.h"

namespace mt::cli::testing {
namespace {

std::string policy_reported(const std::vector<std::string>& env_args) {
  std::vector<std::string> argv = {"/usr/bin/env", "-u", "OMP_WAIT_POLICY", "-u", "MEGATRAIN_OMP_WAIT_POLICY"};
  argv.insert(argv.end(), env_args.begin(), env_args.end());
  for (const char* a : {mt::testing_util::megatrain_bench(), "sgemm", "--n", "32", "--reps", "1", "--json"}) argv.push_back(a);
  RunResult r = run_process(argv);
  EXPECT_EQ(r.rc, 0) << describe(r);
  auto lines = r.json_lines();
  if (lines.size() != 1 || !lines[0].find("omp_wait_policy")) return "(no report)";
  return lines[0].find("omp_wait_policy")->as_string();
}

TEST(OmpWaitPolicy, UnsetBecomesPassive) { EXPECT_EQ(policy_reported({}), "passive"); }

TEST(OmpWaitPolicy, AnExplicitPolicyIsRespected) {
  EXPECT_EQ(policy_reported({"OMP_WAIT_POLICY=active"}), "active");
  EXPECT_EQ(policy_reported({"MEGATRAIN_OMP_WAIT_POLICY=keep"}), "default");
}

}  // namespace
}  // namespace mt::cli::testing

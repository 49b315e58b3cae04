// `megatrain plan` on the shipped specs, as a user runs it (issue 18, point 2).
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/base/host_memory.h"
#include "tests/cli/cli_fixture.h"
#include "tests/test_paths.h"

namespace mt::cli::testing {
namespace {

const std::string kLlama3Spec = std::string(mt::testing_util::source_dir()) + "/deploy/jobs/llama3-8b-tokens.yaml";

// The spec is bf16: its layer inputs are 66 GiB (132 GiB in fp32), so on an H200's budget they
// stay on the device; on an 80 GB card the plan must move them to the host. Either way it counts
// the CUDA backend's own buffers and fits.
TEST(DeviceBudget, Llama3_8bShippedBf16SpecFitsAnH200AndAn80GbCardWithHostLayerInputs) {
  for (const char* budget : {"140GB", "80GB"}) {
    RunResult r = megatrain({"plan", kLlama3Spec, "--device-memory", budget, "--host-memory", "1.5TB", "--json"});
    ASSERT_EQ(r.rc, 0) << describe(r);
    const Json plan = r.json_lines().at(0);
    const bool h200 = std::string(budget) == "140GB";
    EXPECT_EQ(plan.find("precision")->as_string(), "bf16") << r.out;
    EXPECT_TRUE(plan.find("fits")->as_bool()) << r.out;
    EXPECT_EQ(plan.find("checkpoints_on_device")->as_bool(), h200) << r.out;
    EXPECT_LE(plan.find("device_bytes")->as_int(), int64_t(h200 ? 140e9 : 80e9)) << r.out;
    EXPECT_NE(plan.find("device_by_kind")->find("backend"), nullptr) << r.out;
  }
}

// Without a GPU and without --device-memory the plan cannot know the card: it says so.
TEST(DeviceBudget, PlanWithoutAGpuSaysTheDeviceBudgetIsUnknown) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is here: its free memory is the budget";
  RunResult r = megatrain({"plan", kLlama3Spec, "--host-memory", "1.5TB"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  EXPECT_NE(r.out.find("device budget  none (no GPU here)"), std::string::npos) << r.out;
}

// Without --host-memory the host budget is this machine's RAM, as for a run here: a model past it
// does not fit (it had "fits yes" for any size, and the run was killed by the kernel), and a plan
// that does not fit exits 2, as the daemon's RESOURCE_EXHAUSTED does.
TEST(DeviceBudget, AModelPastThisMachinesMemoryDoesNotFitAndExitsTwo) {
  const uint64_t ram = physical_memory_bytes();
  if (ram == 0 || ram > (uint64_t(1) << 40)) GTEST_SKIP() << "this machine's RAM holds an 8B model's 16 B/param";
  RunResult r = megatrain({"plan", kLlama3Spec});
  EXPECT_EQ(r.rc, 2) << describe(r);
  EXPECT_NE(r.out.find("host budget    "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(this machine's RAM"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fits           no: "), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("the plan does not fit: host memory"), std::string::npos) << describe(r);
  RunResult unlimited = megatrain({"plan", kLlama3Spec, "--host-memory", "0", "--device-memory", "140GB", "--json"});
  EXPECT_EQ(unlimited.rc, 0) << describe(unlimited);
}

// Against a server the plan is the server's: an offline budget is refused by name, not dropped
// (refused before any call, so no server needs to listen at the address).
TEST(DeviceBudget, ARemotePlanRefusesTheOfflineFlags) {
  for (std::vector<std::string> flags : {std::vector<std::string>{"--host-memory", "1KB"}, {"--processes", "2"},
                                          {"--offload", "nvme"}, {"--device-tflops", "500"}}) {
    std::vector<std::string> argv = {"plan", kLlama3Spec, "--server", "127.0.0.1:1"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    RunResult r = megatrain(argv);
    EXPECT_EQ(r.rc, 2) << describe(r);
    EXPECT_NE(r.err.find(flags[0] + " is an offline plan's"), std::string::npos) << describe(r);
  }
}

}  // namespace
}  // namespace mt::cli::testing

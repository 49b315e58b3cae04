// A job on a device that faults: it fails naming the failing op, and its checkpoints stay at
// the last good step (none is written from the suspect state).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/base/json.h"
#include "engine/job/job.h"
#include "tests/engine/temp_dir.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

JobSpec streaming_spec(long steps) {
  auto j = Json::parse(R"({"name": "t", "model": {"preset": "tiny"}, "init": {"seed": 3},
      "data": {"source": "synthetic", "seed": 4}, "seq_len": 32, "micro_batch": 4, "global_batch": 8,
      "optimizer": {"lr": 0.003, "grad_clip": 1.0}, "checkpoint": {"every": 1, "keep": 10},
      "executor": "streaming", "backend": "cpu", "steps": )" + std::to_string(steps) + "}");
  EXPECT_TRUE(j.ok());
  auto s = job_spec_from_json(*j);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return *s;
}

TEST(JobFault, AFaultFailsTheJobNamingTheOpAndWritesNoCheckpointFromSuspectState) {
  testing_util::TempDir dir;
  JobHooks hooks;
  hooks.make_backend = [](const JobSpec&) -> Result<std::unique_ptr<Backend>> {
    CpuBackendOptions o;
    auto heads = std::make_shared<int>(0);  // two micro-batches a step: the 5th is step 3's first
    o.inject_fault = [heads](const char* op) { return std::string(op) == "lm_head_loss" && ++*heads == 5; };
    return make_cpu_backend(o);
  };
  auto r = JobRunner(streaming_spec(5), dir.path, hooks).run();
  ASSERT_FALSE(r.ok()) << "a job on a faulted device succeeded";
  EXPECT_NE(r.status().message().find("(lm_head_loss): injected device fault"), std::string::npos)
      << r.status().message();
  std::vector<std::string> steps;
  for (const auto& e : fs::directory_iterator(dir.path + "/checkpoints"))
    if (e.path().filename().string().rfind("step-", 0) == 0) steps.push_back(e.path().filename().string());
  std::sort(steps.begin(), steps.end());
  EXPECT_EQ(steps, (std::vector<std::string>{"step-00000001", "step-00000002"}));
}

}  // namespace
}  // namespace mt

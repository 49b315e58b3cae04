// `devices: 2` on CUDA where it cannot run fails the job with an error that says why, never a
// crash or a hang: without NCCL in the build it names NCCL (before any device is touched); with
// NCCL but no CUDA device it names the device the first backend could not open. Where a GPU is
// present, tests/cuda/data_parallel_cuda_test.cc runs the real thing instead.
#include <gtest/gtest.h>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/dist/nccl_comm.h"
#include "engine/job/job.h"
#include "tests/engine/temp_dir.h"

namespace mt {
namespace {

TEST(DataParallelCudaJob, RefusedClearlyWhereItCannotRun) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is present: the cuda tests run devices: 2 on it";
  auto j = Json::parse(R"({"name": "t", "model": {"preset": "tiny"}, "init": {"seed": 3},
      "data": {"source": "synthetic", "seed": 4}, "seq_len": 32, "micro_batch": 4, "global_batch": 8,
      "steps": 2, "backend": "cuda", "devices": 2})");
  ASSERT_TRUE(j.ok());
  auto spec = job_spec_from_json(*j);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  testing_util::TempDir dir("dp_cuda_job");
  JobHooks hooks;
  long steps = 0;
  hooks.on_step = [&](const StepStats&) { ++steps; };
  auto r = JobRunner(*spec, dir.path, hooks).run();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(steps, 0);
  const std::string m = r.status().message();
  if (!nccl_built()) {
    EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented) << m;
    EXPECT_NE(m.find("needs NCCL"), std::string::npos) << m;
    EXPECT_NE(m.find("devices = 2"), std::string::npos) << m;
  } else {
    EXPECT_NE(m.find("device 0 of devices = 2"), std::string::npos) << m;
    EXPECT_NE(m.find("no usable CUDA device"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace mt

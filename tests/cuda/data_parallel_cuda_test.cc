// devices: 2 on CUDA over NCCL (DataParallelExecutor with make_nccl_comms) against devices: 1 on
// CUDA at the same global batch, and a devices: 2 CUDA job through JobRunner (megatraind's and
// `megatrain train`'s path). The bound is the CPU DataParallel tests' (tests/engine/exec/
// data_parallel_test.cc): each device sums its micro-batches' gradients from zero and the two
// sums are then added (NCCL adds two values in one rounding, as the in-process group does), while
// one device sums all in one chain — fp32 rounding of the gradient that AdamW can amplify where a
// gradient is near zero: 1e-5 relative on the loss, 1e-4 on the weights after 5 steps. The
// kernels are the same on both sides, so CUDA adds nothing to that argument. Needs NCCL and two
// CUDA devices; skips otherwise, saying which is missing.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <ostream>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/data/data_source.h"
#include "engine/dist/nccl_comm.h"
#include "engine/exec/data_parallel_executor.h"
#include "engine/job/job.h"
#include "tests/engine/temp_dir.h"
#include "tests/engine/data_parallel_fixture.h"

namespace mt {
namespace {

#define MT_REQUIRE_TWO_NCCL_DEVICES()                                                             \
  do {                                                                                            \
    if (!nccl_built()) GTEST_SKIP() << "built without NCCL";                                      \
    int count = 0;                                                                                \
    if (cudaGetDeviceCount(&count) != cudaSuccess) (void)cudaGetLastError();                      \
    if (count < 2) GTEST_SKIP() << "devices: 2 needs 2 CUDA devices, this machine has " << count; \
  } while (0)

struct Case {
  const char* name;
  bool tied;
  CheckpointPlacement placement;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::unique_ptr<Backend> cuda_backend(int device) {
  CudaBackendOptions o;
  o.device = device;
  auto b = make_cuda_backend(o);
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  return b.ok() ? std::move(b).value() : nullptr;
}


class DataParallelCuda : public ::testing::TestWithParam<Case> {};

TEST_P(DataParallelCuda, TwoDevicesEqualOneAtTheSameGlobalBatch) {
  MT_REQUIRE_TWO_NCCL_DEVICES();
  const Case& c = GetParam();
  const ModelConfig cfg = testing_util::data_parallel_config(c.tied);
  const TrainOptions opt = testing_util::data_parallel_options(Precision::kFp32);  // 2 micro-batches per device
  StreamingOptions so;
  so.placement = c.placement;
  auto one = StreamingExecutor::create(cfg, opt, so, cuda_backend(0));
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(cuda_backend(0));
  backends.push_back(cuda_backend(1));
  std::vector<Backend*> raw = {backends[0].get(), backends[1].get()};
  auto comms = make_nccl_comms({0, 1});
  ASSERT_TRUE(comms.ok()) << comms.status().to_string();
  auto dp = DataParallelExecutor::create(cfg, opt, so, std::move(backends), {}, {}, std::move(comms).value());
  ASSERT_TRUE(dp.ok()) << dp.status().to_string();
  init_weights(cfg, (*one)->store(), 7);
  init_weights(cfg, (*dp)->store(), 7);
  auto src = make_synthetic_source({5, cfg.vocab_size, 32, 3});
  Batch b;
  for (int s = 0; s < 5; ++s) {
    ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, b).ok());
    if (s == 2) b.targets[3] = b.targets[70] = -1;  // masked: the global count, not each shard's
    auto r1 = (*one)->step(b);
    auto rn = (*dp)->step(b);
    ASSERT_TRUE(r1.ok()) << r1.status().to_string();
    ASSERT_TRUE(rn.ok()) << rn.status().to_string();
    EXPECT_NEAR(r1->loss, rn->loss, 1e-5 * r1->loss) << "step " << s;
    EXPECT_EQ(rn->tokens, r1->tokens);
  }
  ASSERT_TRUE((*one)->sync().ok());
  ASSERT_TRUE((*dp)->sync().ok());
  for (Backend* be : raw) EXPECT_TRUE(be->error().ok()) << be->error().to_string();
  const double rel = testing_util::max_master_rel_diff((*dp)->store(), (*one)->store());
  EXPECT_LT(rel, 1e-4);
  std::printf("CUDA devices 2 over NCCL: largest relative master difference to devices 1 after 5 steps: %.3g\n", rel);
  for (int d = 0; d < 2; ++d) EXPECT_EQ(&(*dp)->replica(d).store(), &(*dp)->store());
  EXPECT_EQ((*dp)->store().total_bytes(), (*one)->store().total_bytes());
}

INSTANTIATE_TEST_SUITE_P(Nccl, DataParallelCuda,
                         ::testing::Values(Case{"untied_device", false, CheckpointPlacement::kDevice},
                                           Case{"tied_host", true, CheckpointPlacement::kHost}),
                         [](const auto& info) { return std::string(info.param.name); });

// The job path: backend cuda, devices: 2 builds CUDA devices 0 and 1 and their NCCL group, and
// trains (the loss falls over a few steps of the tiny preset).
TEST(DataParallelCudaJob, TwoDevicesTrain) {
  MT_REQUIRE_TWO_NCCL_DEVICES();
  auto j = Json::parse(R"({"name": "t", "model": {"preset": "tiny"}, "init": {"seed": 3},
      "data": {"source": "synthetic", "seed": 4}, "seq_len": 32, "micro_batch": 4, "global_batch": 16,
      "optimizer": {"lr": 0.003}, "steps": 12, "backend": "cuda", "precision": "fp32", "devices": 2})");
  ASSERT_TRUE(j.ok());
  auto spec = job_spec_from_json(*j);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  testing_util::TempDir dir("dp_cuda_job");
  std::vector<double> losses;
  JobHooks hooks;
  hooks.on_step = [&](const StepStats& s) { losses.push_back(s.loss); };
  auto r = JobRunner(*spec, dir.path, hooks).run();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(losses.size(), 12u);
  EXPECT_LT(losses.back(), losses.front() - 0.1);
}

}  // namespace
}  // namespace mt

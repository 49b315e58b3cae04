// JobRunner end to end on the CPU: a job trains and checkpoints, a cancelled job resumes, and
// resume equals an uninterrupted run bit for bit. (Spec parsing: job_spec_test.cc.)
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <fstream>
#include <random>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/io/checkpoint.h"
#include "engine/io/tensorboard.h"
#include "engine/job/job.h"

#include "tests/engine/job/tiny_job.h"
#include "tests/engine/temp_dir.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

using testing_util::TempDir;
using testing_util::run_stopped_at;
using testing_util::tiny_spec;

TEST(JobRunner, TrainsAndCheckpoints) {
  TempDir dir;
  std::vector<double> losses;
  JobHooks hooks;
  hooks.on_step = [&](const StepStats& s) { losses.push_back(s.loss); };
  JobRunner runner(tiny_spec("streaming", 12), dir.path, hooks);
  auto r = runner.run();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->steps_done, 12);
  ASSERT_EQ(losses.size(), 12u);
  EXPECT_LT(losses.back(), losses.front() - 0.3);
  EXPECT_TRUE(fs::exists(fs::path(r->checkpoint) / "model.safetensors"));
  EXPECT_TRUE(fs::exists(fs::path(dir.path) / "checkpoints" / "latest"));
}

std::string file_bytes(const fs::path& p) {
  auto r = read_file(p.string());
  EXPECT_TRUE(r.ok()) << p;
  return r.ok() ? *r : std::string();
}

class ResumeExactness : public ::testing::TestWithParam<std::string> {};

// A learning rate of 1e30 trains step 1 to finite but enormous weights; step 2's loss is then not
// finite. The job fails naming step 2, and its checkpoints stay at step 1: the failing step wrote
// none and applied no update.
class NonFiniteJob : public ::testing::TestWithParam<std::string> {};

TEST_P(NonFiniteJob, FailsNamingTheStepAndKeepsTheLastGoodCheckpoint) {
  TempDir dir;
  JobSpec spec = tiny_spec(GetParam(), 4);
  spec.train.optimizer.lr = 1e30f;
  spec.train.schedule.warmup_steps = 0;
  spec.checkpoint.every = 1;
  auto r = JobRunner(spec, dir.path, {}).run();
  ASSERT_FALSE(r.ok()) << "a run to inf weights succeeded";
  EXPECT_NE(r.status().message().find("step 2: the loss is not finite"), std::string::npos) << r.status().message();
  auto latest = resolve_checkpoint(dir.path + "/checkpoints");
  ASSERT_TRUE(latest.ok()) << latest.status().to_string();
  auto state = Json::parse(file_bytes(fs::path(*latest) / "trainer_state.json"));
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->find("step")->as_int(), 1);
}

INSTANTIATE_TEST_SUITE_P(Cpu, NonFiniteJob, ::testing::Values("resident", "streaming", "speculative"));

TEST_P(ResumeExactness, ResumeEqualsUninterrupted) {
  const long N = 4;
  TempDir a, b;
  JobRunner whole(tiny_spec(GetParam(), 2 * N), a.path, {});
  auto ra = whole.run();
  ASSERT_TRUE(ra.ok()) << ra.status().to_string();

  auto r1 = run_stopped_at(tiny_spec(GetParam(), 2 * N), b.path, N);
  ASSERT_TRUE(r1.ok()) << r1.status().to_string();
  EXPECT_TRUE(r1->cancelled);
  EXPECT_EQ(r1->steps_done, N);

  JobRunner second(tiny_spec(GetParam(), 2 * N), b.path, {});  // fresh state from disk
  auto r2 = second.run();
  ASSERT_TRUE(r2.ok()) << r2.status().to_string();
  EXPECT_EQ(r2->steps_done, 2 * N);
  EXPECT_EQ(r2->final_loss, ra->final_loss);
  for (const char* f : {"model.safetensors", "optimizer.safetensors"})
    EXPECT_TRUE(file_bytes(fs::path(ra->checkpoint) / f) == file_bytes(fs::path(r2->checkpoint) / f)) << f;
}

INSTANTIATE_TEST_SUITE_P(Cpu, ResumeExactness, ::testing::Values("resident", "streaming", "speculative"));

// Periodic checkpoints are written while the next steps train (checkpoint_in_flight.h): each is
// told once published, in order, says what it cost, and holds the bytes that a run stopped at its
// step writes between steps.
class InFlightCheckpoints : public ::testing::TestWithParam<std::string> {};

TEST_P(InFlightCheckpoints, HoldTheirStepsBytesAndAreToldInOrder) {
  TempDir a, b;
  JobSpec spec = tiny_spec(GetParam(), 6);
  spec.checkpoint.every = 2;
  spec.checkpoint.keep = 5;
  std::vector<long> told;
  int beside = 0;
  JobHooks hooks;
  hooks.on_checkpoint = [&](const std::string&, long step) { told.push_back(step); };
  hooks.on_log = [&](LogLevel, const std::string& m) { beside += m.find("beside training; training paused") != std::string::npos; };
  auto ra = JobRunner(spec, a.path, hooks).run();
  ASSERT_TRUE(ra.ok()) << ra.status().to_string();
  EXPECT_EQ(told, (std::vector<long>{2, 4, 6}));
  EXPECT_EQ(beside, 2) << "the checkpoints of steps 2 and 4";

  JobSpec between = spec;
  between.checkpoint.every = 0;
  auto r = run_stopped_at(between, b.path, 4);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->steps_done, 4);
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "trainer_state.json"})
    EXPECT_TRUE(file_bytes(checkpoint_step_dir(a.path + "/checkpoints", 4) + "/" + f) == file_bytes(fs::path(r->checkpoint) / f))
        << f;
}

INSTANTIATE_TEST_SUITE_P(Cpu, InFlightCheckpoints, ::testing::Values("resident", "streaming", "speculative"));

// A stop waits checkpoint_bound_s for a checkpoint (the daemon's --shutdown_timeout): one expected
// to take longer, at the bandwidth the last one reached, is warned about before it starts; the
// first has nothing to go by. Each checkpoint reports its cost before it is told.
TEST(JobRunner, ACheckpointExpectedToOutlastAStopIsWarnedAbout) {
  TempDir dir;
  JobSpec spec = tiny_spec("streaming", 3);
  spec.checkpoint.every = 1;
  std::vector<std::string> warnings;
  std::vector<CheckpointReport> costs;
  std::vector<long> told;
  JobHooks hooks;
  hooks.checkpoint_bound_s = 1e-9;
  hooks.on_log = [&](LogLevel l, const std::string& m) {
    if (l == LogLevel::kWarning && m.find("--shutdown_timeout") != std::string::npos) warnings.push_back(m);
  };
  hooks.on_checkpoint_cost = [&](const CheckpointReport& r) {
    EXPECT_EQ(std::count(told.begin(), told.end(), r.step), 0) << "reported after it was told";
    costs.push_back(r);
  };
  hooks.on_checkpoint = [&](const std::string&, long step) { told.push_back(step); };
  auto r = JobRunner(spec, dir.path, hooks).run();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(warnings.size(), 2u) << "before the checkpoints of steps 2 and 3, not before the first";
  for (const std::string& w : warnings) EXPECT_NE(w.find("is expected to take"), std::string::npos) << w;
  ASSERT_EQ(costs.size(), 3u);
  for (const CheckpointReport& c : costs) {
    EXPECT_GT(c.bytes, 0u);
    EXPECT_GT(c.write_seconds, 0);
    EXPECT_GE(c.pause_seconds, 0);
  }
  EXPECT_TRUE(costs[0].beside_training && costs[1].beside_training);
  EXPECT_FALSE(costs[2].beside_training) << "the last one is written between steps";
  EXPECT_GE(costs[2].pause_seconds, costs[2].write_seconds);
  EXPECT_EQ(told, (std::vector<long>{1, 2, 3}));
}

// speculative_updates: on trains the same model as off, byte for byte (steps that clip and steps
// that do not), and stays out of the hash: either resumes the other's checkpoints.
TEST(JobRunner, SpeculativeUpdatesTrainTheSameModelAsThePlainSchedule) {
  TempDir a, b;
  auto ra = JobRunner(tiny_spec("streaming", 8), a.path, {}).run();
  auto rb = JobRunner(tiny_spec("speculative", 8), b.path, {}).run();
  ASSERT_TRUE(ra.ok() && rb.ok()) << rb.status().to_string();
  // The job's executor is planned to speculate (SpeculativeUpdates.* count the updates it makes).
  const JobSpec spec_on = tiny_spec("speculative", 8);
  const auto planned = plan_for_job(spec_on, *resolve_model(spec_on), 0, 0);
  ASSERT_TRUE(planned.ok()) << planned.status().to_string();
  EXPECT_GT(planned->speculative_units, 0) << planned->speculation;
  EXPECT_EQ(ra->final_loss, rb->final_loss);
  for (const char* f : {"model.safetensors", "optimizer.safetensors"})
    EXPECT_TRUE(file_bytes(fs::path(ra->checkpoint) / f) == file_bytes(fs::path(rb->checkpoint) / f)) << f;
  EXPECT_EQ(job_spec_hash(tiny_spec("streaming", 8)), job_spec_hash(tiny_spec("speculative", 8)));
  auto spec = job_spec_from_json(job_spec_to_json(tiny_spec("speculative", 8)));
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->speculative_updates, "on");
}

// logging.tensorboard round-trips and, like priority, stays out of the trajectory's hash.
// logging.tensorboard: every step's scalars in JOB_DIR/tensorboard, as the step reported them;
// a run killed after its checkpoint (its later steps in the file, a torn record at the end)
// resumes with each step in the file exactly once, and the resumed values are the real ones.
TEST(JobRunner, TensorBoardCurvesSurviveAKilledRunWithoutDuplicateSteps) {
  TempDir dir;
  JobSpec spec = tiny_spec("streaming", 6);
  spec.logging.tensorboard = true;
  std::map<long, StepStats> seen;
  JobHooks hooks;
  JobRunner* first_ptr = nullptr;
  hooks.on_step = [&](const StepStats& s) {
    seen[s.step] = s;
    if (s.step == 4 && first_ptr) first_ptr->request_cancel();
  };
  JobRunner first(spec, dir.path, hooks);
  first_ptr = &first;
  ASSERT_TRUE(first.run().ok());
  const std::string path = dir / (std::string("tensorboard/") + kTensorBoardFile);
  {  // what a run killed after step 5 leaves: step 5 (not checkpointed), then a torn record
    auto w = TensorBoardWriter::open(dir / "tensorboard", 100);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->scalars(5, 0, {{"train/loss", 99.0}}).ok());
    ASSERT_TRUE((*w)->scalars(6, 0, {{"train/loss", 99.0}}).ok());
  }
  fs::resize_file(path, fs::file_size(path) - 3);
  first_ptr = nullptr;
  JobRunner second(spec, dir.path, hooks);
  auto r = second.run();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->steps_done, 6);
  auto f = read_tensorboard_file(path);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->ends.back(), f->size);
  ASSERT_EQ(f->events.size(), 7u) << "the version record and steps 1..6, once each";
  for (long step = 1; step <= 6; ++step) {
    const TensorBoardEvent& e = f->events[size_t(step)];
    ASSERT_EQ(e.step, step);
    std::map<std::string, double> v(e.scalars.begin(), e.scalars.end());
    for (const char* tag : {"train/loss", "train/grad_norm", "train/learning_rate", "perf/tokens_per_second",
                            "perf/model_tflops", "perf/h2d_gbps", "perf/stall_seconds"})
      EXPECT_EQ(v.count(tag), 1u) << tag << " at step " << step;
    EXPECT_EQ(v["train/loss"], double(float(seen[step].loss))) << "step " << step;
    EXPECT_EQ(v["train/grad_norm"], double(float(seen[step].grad_norm))) << "step " << step;
    EXPECT_EQ(v["train/learning_rate"], double(seen[step].lr)) << "step " << step;
    EXPECT_GT(v["perf/tokens_per_second"], 0);
  }
}

// The device budget a job was admitted under reaches its executor (issue 11, point 10): a budget
// below the all-on-device plan places layer inputs on the host and the step stays inside it; one
// below anything that fits is refused naming the device.
TEST(JobRunner, AdmittedDeviceBudgetReachesTheExecutor) {
  const JobSpec spec = tiny_spec("streaming", 1);
  auto cfg = resolve_model(spec);
  ASSERT_TRUE(cfg.ok());
  auto unlimited = plan_for_job(spec, *cfg, 0, 0);
  ASSERT_TRUE(unlimited.ok());
  ASSERT_TRUE(unlimited->checkpoints_on_device);
  const uint64_t budget = unlimited->device_bytes - 1;
  auto tight = plan_for_job(spec, *cfg, 0, budget);
  ASSERT_TRUE(tight.ok() && tight->fits) << tight->reason;
  EXPECT_FALSE(tight->checkpoints_on_device);

  TempDir a("job_budget_fits"), b("job_budget_refused");
  uint64_t peak = 0;
  JobHooks hooks;
  hooks.on_step = [&](const StepStats& s) { peak = s.device_peak_bytes; };
  auto ok = JobRunner(spec, a.path, hooks, budget).run();
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_GT(peak, 0u);
  EXPECT_LE(peak, budget);
  auto refused = JobRunner(spec, b.path, {}, 4096).run();
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("device"), std::string::npos) << refused.status().to_string();
}

// A job that runs on CUDA plans the CUDA backend's own buffers, sized by its micro-batch; a CPU
// job plans none. (Computed here without a GPU: the sizes come from CudaBackendOptions.)
TEST(DeviceBudget, ACudaJobPlansTheBackendsBuffers) {
  JobSpec spec = tiny_spec("streaming", 1);
  auto cfg = resolve_model(spec);
  ASSERT_TRUE(cfg.ok());
  spec.backend = "cpu";
  EXPECT_EQ(job_plan_options(spec, *cfg).backend_bytes, 0u);
  spec.backend = "cuda";
  const uint64_t tokens = uint64_t(spec.train.micro_batch) * uint64_t(spec.train.seq_len);
  const uint64_t want = cuda_fixed_device_bytes(CudaBackendOptions{}, tokens, uint64_t(cfg->hidden_size));
  EXPECT_EQ(job_plan_options(spec, *cfg).backend_bytes, want);
  EXPECT_GT(want, CudaBackendOptions{}.gemm_workspace_bytes);
  auto plan = plan_for_job(spec, *cfg, 0, 0);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->device_bytes - plan->arena_bytes, want);
}

// A model whose heads the CUDA attention kernels cannot hold is refused when a CUDA job is
// planned (the daemon's admission and `megatrain plan`), before any memory is reserved; the CPU
// backend runs it.
TEST(BackendSupport, CudaRefusesAHeadDimBeyondItsKernelsAtPlan) {
  JobSpec spec = tiny_spec("streaming", 1);
  auto cfg = resolve_model(spec);
  ASSERT_TRUE(cfg.ok());
  ModelConfig wide = *cfg;
  wide.head_dim = cpu::kCudaAttentionMaxHeadDim + 32;
  spec.backend = "cuda";
  auto refused = plan_for_job(spec, wide, 0, 0);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("head_dim = 288"), std::string::npos) << refused.status().to_string();
  EXPECT_TRUE(plan_for_job(spec, *cfg, 0, 0).ok());
  spec.backend = "cpu";
  EXPECT_TRUE(plan_for_job(spec, wide, 0, 0).ok());
  EXPECT_TRUE(make_cpu_backend({})->supports_head_dim(wide.head_dim).ok());
}

TEST(JobRunner, ResumeWithADifferentSpecIsRefused) {
  TempDir dir;
  ASSERT_TRUE(JobRunner(tiny_spec("resident", 2), dir.path, {}).run().ok());
  JobSpec other = tiny_spec("resident", 4);
  other.train.optimizer.lr = 0.01f;
  auto r = JobRunner(other, dir.path, {}).run();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);  // a spec error: the CLI exits 2
  EXPECT_NE(r.status().message().find("different job spec"), std::string::npos);
  EXPECT_NE(r.status().message().find("lr 0.0"), std::string::npos) << r.status().message();  // names the field
}


// `latest` gone (a kill between a step directory's rename and the write of `latest`, or a copy
// that left it out): the run resumes from the newest complete step directory, so another spec
// is still refused and the same one ends like an uninterrupted run. It once trained from step 0
// and overwrote the step directories.
TEST(JobRunner, WithoutLatestTheNewestStepDirectoryIsResumed) {
  TempDir a, b;
  auto whole = JobRunner(tiny_spec("streaming", 6), a.path, {}).run();
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  ASSERT_TRUE(run_stopped_at(tiny_spec("streaming", 6), b.path, 3).ok());
  const fs::path root = fs::path(b.path) / "checkpoints";
  ASSERT_TRUE(fs::remove(root / "latest"));
  const auto step3 = file_bytes(root / "step-00000003" / "model.safetensors");

  JobSpec other = tiny_spec("streaming", 6);
  other.init.seed = 9;
  auto refused = JobRunner(other, b.path, {}).run();
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("different job spec"), std::string::npos) << refused.status().message();
  EXPECT_TRUE(file_bytes(root / "step-00000003" / "model.safetensors") == step3) << "the checkpoint is untouched";

  auto resumed = JobRunner(tiny_spec("streaming", 6), b.path, {}).run();
  ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
  EXPECT_EQ(resumed->steps_run, 3);
  EXPECT_EQ(resumed->final_loss, whole->final_loss);
  for (const char* f : {"model.safetensors", "optimizer.safetensors"})
    EXPECT_TRUE(file_bytes(fs::path(whole->checkpoint) / f) == file_bytes(fs::path(resumed->checkpoint) / f)) << f;
}

// memory.offload: nvme with no nvme_paths in a run of its own (megatraind gives its --nvme_paths):
// refused before anything is taken. It trained with the whole state in memory and said nothing.
TEST(JobRunner, AnNvmeTierWithoutPathsIsRefused) {
  TempDir dir;
  JobSpec spec = tiny_spec("streaming", 2);
  spec.offload = "nvme";
  ASSERT_TRUE(validate(spec).ok()) << "the daemon fills the paths in later";
  auto r = JobRunner(spec, dir.path, {}).run();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("memory.offload = nvme needs memory.nvme_paths"), std::string::npos)
      << r.status().to_string();
  EXPECT_FALSE(fs::exists(fs::path(dir.path) / "checkpoints" / "latest"));
}

// Issue 24.4: a kill while a checkpoint off the `every` grid was written (a pause at step 3) left
// a partial .tmp-step-00000003 and a .latest.tmp; the next run removes both, lists neither as a
// checkpoint, resumes from the last complete one and ends like an uninterrupted run.
TEST(JobRunner, StaleTempCheckpointsAreRemovedWhenTheJobResumes) {
  TempDir dir, ref;
  ASSERT_TRUE(run_stopped_at(tiny_spec("resident", 4), dir.path, 2).ok());
  const fs::path root = fs::path(dir.path) / "checkpoints";
  fs::create_directories(root / ".tmp-step-00000003");
  std::ofstream(root / ".tmp-step-00000003" / "model.safetensors") << "partial";
  fs::create_directories(root / ".tmp-step-00000007");
  std::ofstream(root / ".latest.tmp") << "step-000";
  auto listed = list_checkpoints(root.string());
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->at(0).step, 2);
  std::vector<std::string> warnings;
  JobHooks hooks;
  hooks.on_log = [&](LogLevel level, const std::string& m) {
    if (level == LogLevel::kWarning) warnings.push_back(m);
  };
  auto r = JobRunner(tiny_spec("resident", 4), dir.path, hooks).run();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string n = e.path().filename().string();
    EXPECT_TRUE(n == "latest" || n.rfind("step-", 0) == 0) << "left behind: " << n;
  }
  ASSERT_EQ(warnings.size(), 3u);
  EXPECT_NE(warnings[0].find(".latest.tmp"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[1].find(".tmp-step-00000003, a checkpoint a killed run did not finish"), std::string::npos) << warnings[1];
  auto whole = JobRunner(tiny_spec("resident", 4), ref.path, {}).run();
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(r->final_loss, whole->final_loss);
  EXPECT_EQ(file_bytes(fs::path(r->checkpoint) / "model.safetensors"),
            file_bytes(fs::path(whole->checkpoint) / "model.safetensors"));
}

// Issue 11.3: a run that has nothing left to train reports the loss its checkpoint saved (it
// used to report 0), trains nothing and writes no new checkpoint.
TEST(JobRunner, FinishedJobRerunReportsTheSavedLoss) {
  TempDir dir;
  auto first = JobRunner(tiny_spec("resident", 3), dir.path, {}).run();
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  ASSERT_GT(first->final_loss, 0);
  long steps_seen = 0;
  JobHooks hooks;
  hooks.on_step = [&](const StepStats&) { ++steps_seen; };
  auto again = JobRunner(tiny_spec("resident", 3), dir.path, hooks).run();
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->final_loss, first->final_loss);
  EXPECT_EQ(again->steps_done, 3);
  EXPECT_EQ(again->steps_run, 0);
  EXPECT_EQ(again->tokens_per_second, 0);
  EXPECT_EQ(again->checkpoint, first->checkpoint);
  EXPECT_EQ(steps_seen, 0);
}

// Issue 11.13: `steps` is the LR schedule's span; resuming with another one is refused by name
// (a constant schedule does not depend on it, so it may be extended).
TEST(JobRunner, ResumeWithDifferentStepsIsRefusedUnlessTheScheduleIsConstant) {
  TempDir dir;
  ASSERT_TRUE(JobRunner(tiny_spec("resident", 2), dir.path, {}).run().ok());
  auto r = JobRunner(tiny_spec("resident", 4), dir.path, {}).run();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);  // a spec error: the CLI exits 2
  EXPECT_NE(r.status().message().find("steps = 4 differs from the steps = 2"), std::string::npos)
      << r.status().message();

  TempDir flat;
  JobSpec constant = tiny_spec("resident", 2);
  constant.train.schedule.decay = LrDecay::kConstant;
  ASSERT_TRUE(JobRunner(constant, flat.path, {}).run().ok());
  constant.steps = constant.train.schedule.total_steps = 4;
  auto extended = JobRunner(constant, flat.path, {}).run();
  ASSERT_TRUE(extended.ok()) << extended.status().to_string();
  EXPECT_EQ(extended->steps_done, 4);
}

// A source with no data: UNAVAILABLE until `ready` batches are allowed.
class StarvingSource final : public DataSource {
 public:
  // `unavailable` counts the UNAVAILABLE answers; it is the test's, since the runner frees the source.
  StarvingSource(std::unique_ptr<DataSource> inner, int ready, int& unavailable)
      : inner_(std::move(inner)), ready_(ready), unavailable_(unavailable) {}
  Status next_batch(int g, int t, Batch& out) override {
    if (ready_ == 0) {
      ++unavailable_;
      return Status(StatusCode::kUnavailable, "no data now");
    }
    --ready_;
    return inner_->next_batch(g, t, out);
  }
  uint64_t cursor() const override { return inner_->cursor(); }
  Status seek(uint64_t c) override { return inner_->seek(c); }
  std::string describe() const override { return "starving " + inner_->describe(); }

 private:
  std::unique_ptr<DataSource> inner_;
  int ready_;
  int& unavailable_;
};

// Issue 11.11: while the source has no data a requested checkpoint is written at once, and the
// runner stops (checkpointed, starved) when the yield hook says so; a later run resumes there.
TEST(JobRunner, StarvedSourceCheckpointsOnRequestAndYields) {
  TempDir dir;
  JobSpec spec = tiny_spec("resident", 6);
  spec.data.source = "push";
  int unavailable = 0;
  std::vector<long> checkpoints;
  int asked = 0;
  JobRunner* runner_ptr = nullptr;
  JobHooks hooks;
  hooks.make_push_source = [&](const JobSpec&, int vocab) -> Result<std::unique_ptr<DataSource>> {
    MT_ASSIGN_OR_RETURN(auto inner, make_synthetic_source({4, vocab, 64, 4}));
    return std::unique_ptr<DataSource>(std::make_unique<StarvingSource>(std::move(inner), 2, unavailable));
  };
  hooks.on_checkpoint = [&](const std::string&, long step) { checkpoints.push_back(step); };
  hooks.yield_when_starved = [&] {  // asks for a checkpoint while starved, waits twice, then yields
    if (++asked == 1) runner_ptr->request_checkpoint();
    return asked == 3;
  };
  JobRunner runner(spec, dir.path, hooks);
  runner_ptr = &runner;
  auto r = runner.run();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->starved);
  EXPECT_EQ(r->steps_done, 2);
  EXPECT_EQ(unavailable, 3);
  // The request is written while starved; the final checkpoint is that same one, not rewritten.
  EXPECT_EQ(checkpoints, (std::vector<long>{2, 2}));
  EXPECT_TRUE(fs::exists(fs::path(dir.path) / "checkpoints" / "step-00000002"));
}

}  // namespace
}  // namespace mt

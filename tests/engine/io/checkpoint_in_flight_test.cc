// Checkpoints written while training goes on (checkpoint_in_flight.h): with a writer slowed so
// the next steps' updates would overtake it, the checkpoint still holds the bytes of the step it
// started at (those of a checkpoint written between steps, by a twin executor), the training
// beside it is the twin's bit for bit, and the writer captures the units in the optimizer's
// order; a writer that fails lets the training go on and leaves the previous checkpoint current.
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <ostream>
#include <thread>

#include "engine/exec/streaming_executor.h"
#include "engine/io/checkpoint_in_flight.h"
#include "engine/io/direct_io.h"
#include "tests/engine/nvme_dir.h"
#include "tests/engine/temp_dir.h"
#include "tests/engine/test_model.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

std::string bytes_of(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

struct Case {
  const char* name;
  MemoryLayout layout;
  Precision precision;
  bool update_during_backward;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

const ModelConfig kCfg = testing_util::test_model_config({"LlamaForCausalLM", 32, 4, 4, 2, 48, 64, false});

TrainOptions options_of(const Case& c) {
  TrainOptions o;
  o.seq_len = 12;
  o.micro_batch = 2;
  o.global_batch = 4;
  o.layout = c.layout;
  o.precision = c.precision;
  o.optimizer.lr = 3e-3f;
  o.optimizer.grad_clip = c.update_during_backward ? 0.0f : 1.5f;
  return o;
}

std::unique_ptr<StreamingExecutor> make(const Case& c) {
  StreamingOptions so;
  so.update_during_backward = c.update_during_backward;
  auto e = StreamingExecutor::create(kCfg, options_of(c), so, make_cpu_backend({}));
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  if (!e.ok()) return nullptr;
  init_weights(kCfg, (*e)->store(), 11);
  return std::move(*e);
}

// Small pieces, each write held up 3 ms: the writer takes far longer than a step.
struct SlowWriter {
  FileIoOptions saved = checkpoint_io_options();
  SlowWriter() {
    set_checkpoint_io_options({FileIoMode::kDirect, 2, kDirectIoAlign});
    set_io_faults_for_testing({0, [](const std::string&, uint64_t) {
                                 std::this_thread::sleep_for(std::chrono::milliseconds(3));
                                 return 0;
                               }});
  }
  ~SlowWriter() {
    set_checkpoint_io_options(saved);
    set_io_faults_for_testing({});
  }
};

class CheckpointInFlightTest : public ::testing::TestWithParam<Case> {};

TEST_P(CheckpointInFlightTest, HoldsTheStepItStartedAtWhileTrainingGoesOn) {
  const Case& c = GetParam();
  auto x = make(c), y = make(c);
  ASSERT_TRUE(x && y);
  const TrainOptions opt = options_of(c);
  auto src = make_synthetic_source({5, kCfg.vocab_size, 32, 3});
  ASSERT_TRUE(src.ok());
  Batch batch;
  auto both_step = [&](bool expect_equal) {
    ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, batch).ok());
    auto rx = x->step(batch);
    auto ry = y->step(batch);
    ASSERT_TRUE(rx.ok() && ry.ok());
    if (expect_equal) {
      EXPECT_EQ(rx->loss, ry->loss);
    }
  };
  for (int s = 0; s < 3; ++s) both_step(true);
  ASSERT_TRUE(x->sync().ok());
  ASSERT_TRUE(y->sync().ok());
  TrainerState state;
  state.step = 3;

  // Between steps, the reference; the writer hears of the units in the optimizer's order.
  testing_util::TempDir ref("mt-inflight-ref"), root("mt-inflight");
  std::mutex mu;
  std::vector<size_t> captured;
  auto saved = save_checkpoint(ref.path, kCfg, x->store(), state, 2, 0, [&](size_t u) {
    std::lock_guard<std::mutex> l(mu);
    captured.push_back(u);
  });
  ASSERT_TRUE(saved.ok()) << saved.status().to_string();
  EXPECT_EQ(captured, y->store().update_order());

  std::unique_ptr<CheckpointInFlight> in_flight;
  {
    SlowWriter slow;
    const auto t0 = std::chrono::steady_clock::now();  // before the writer's own start
    auto started = CheckpointInFlight::start(root.path, kCfg, y->store(), state, 2, 0);
    ASSERT_TRUE(started.ok()) << started.status().to_string();
    in_flight = std::move(*started);
    for (int s = 0; s < 2; ++s) both_step(true);  // y's updates follow the writer
    ASSERT_TRUE(y->sync().ok());
    const double trained = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto dir = in_flight->finish();
    ASSERT_TRUE(dir.ok()) << dir.status().to_string();
    const CheckpointCost cost = in_flight->cost();
    EXPECT_GT(cost.bytes, 0u);
    EXPECT_GT(cost.write_seconds, 0.0);
    // The updates of the steps beside it waited for the writer, unless the training outlasted
    // the writer's captures (a loaded machine): an update that never waited came after its
    // unit's capture. Not the whole write: the files after the last capture hold no update back.
    EXPECT_GT(cost.captured_seconds, 0.0);
    EXPECT_LE(cost.captured_seconds, cost.write_seconds);
    EXPECT_TRUE(cost.updates_waited > 0 || trained > cost.captured_seconds)
        << "captured after " << cost.captured_seconds << " s, trained " << trained << " s";
    EXPECT_EQ(*dir, checkpoint_step_dir(root.path, 3));
  }
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "trainer_state.json", "config.json"}) {
    const std::string want = bytes_of(fs::path(*saved) / f);
    EXPECT_FALSE(want.empty()) << f;
    EXPECT_TRUE(want == bytes_of(fs::path(checkpoint_step_dir(root.path, 3)) / f)) << f << " differs";
  }
  EXPECT_EQ(bytes_of(fs::path(root.path) / "latest"), "step-00000003\n");
  // The twins are still equal: the training beside the writer is the one without it.
  ASSERT_TRUE(x->sync().ok());
  both_step(true);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, CheckpointInFlightTest,
    ::testing::Values(Case{"ExactFp32Clipped", MemoryLayout::kExact, Precision::kFp32, false},
                      Case{"CompactBf16Clipped", MemoryLayout::kCompact, Precision::kBf16, false},
                      Case{"CompactBf16DuringBackward", MemoryLayout::kCompact, Precision::kBf16, true}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(CheckpointInFlight, AFailedWriterLetsTrainingGoOnAndKeepsThePreviousCheckpoint) {
  const Case c{"", MemoryLayout::kCompact, Precision::kFp32, false};
  auto y = make(c);
  ASSERT_TRUE(y);
  const TrainOptions opt = options_of(c);
  auto src = make_synthetic_source({5, kCfg.vocab_size, 32, 3});
  ASSERT_TRUE(src.ok());
  Batch batch;
  testing_util::TempDir root("mt-inflight-fail");
  TrainerState state;
  state.step = 1;
  ASSERT_TRUE(save_checkpoint(root.path, kCfg, y->store(), state, 2).ok());
  const std::string model = bytes_of(fs::path(checkpoint_step_dir(root.path, 1)) / "model.safetensors");
  {
    SlowWriter slow;
    set_io_faults_for_testing({0, [](const std::string& path, uint64_t off) {
                                 return path.find("model.safetensors") != std::string::npos && off > 0 ? EIO : 0;
                               }});
    state.step = 2;
    auto in_flight = CheckpointInFlight::start(root.path, kCfg, y->store(), state, 2, 0);
    ASSERT_TRUE(in_flight.ok());
    for (int s = 0; s < 2; ++s) {  // not held up for ever by a writer that will never capture a unit
      ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, batch).ok());
      ASSERT_TRUE(y->step(batch).ok());
    }
    ASSERT_TRUE(y->sync().ok());
    auto dir = (*in_flight)->finish();
    ASSERT_FALSE(dir.ok());
    EXPECT_NE(dir.status().message().find("model.safetensors"), std::string::npos) << dir.status().message();
    EXPECT_NE(dir.status().message().find("Input/output error"), std::string::npos) << dir.status().message();
  }
  EXPECT_EQ(bytes_of(fs::path(root.path) / "latest"), "step-00000001\n");
  EXPECT_FALSE(fs::exists(fs::path(root.path) / "step-00000002"));
  EXPECT_EQ(bytes_of(fs::path(checkpoint_step_dir(root.path, 1)) / "model.safetensors"), model);
}

TEST(CheckpointInFlight, RefusesAStoreOnTheNvmeTier) {
  testing_util::NvmeDir drive("inflight-nvme");
  StreamingOptions so;
  so.nvme.paths = {drive.path};
  auto e = StreamingExecutor::create(kCfg, options_of({"", MemoryLayout::kCompact, Precision::kFp32, false}), so,
                                     make_cpu_backend({}));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  ASSERT_NE((*e)->store().tier(), nullptr);
  testing_util::TempDir root("mt-inflight-nvme");
  auto r = CheckpointInFlight::start(root.path, kCfg, (*e)->store(), TrainerState{}, 2, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("NVMe tier"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace mt

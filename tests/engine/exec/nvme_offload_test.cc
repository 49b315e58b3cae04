// The NVMe tier in training: the streaming executor with the Adam moments (and the masters) on
// the drives against the same executor with everything in memory — the same losses, norms,
// masters, moments and shadows, bit for bit, over steps that clip and steps that do not, in
// both layouts and precisions, on two devices, through a window of one, for a mixture of
// experts; a checkpoint of the tiered store holds the in-memory one's bytes, and resuming from
// it through a fresh tier goes on as the in-memory run does; and a drive's I/O error in the
// middle of a step fails the job naming the path and the unit.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <ostream>
#include <vector>

#include "engine/exec/data_parallel_executor.h"
#include "engine/exec/streaming_executor.h"
#include "engine/io/checkpoint.h"
#include "tests/engine/moe_models.h"
#include "tests/engine/nvme_dir.h"
#include "tests/engine/test_model.h"

namespace mt {
namespace {

using testing_util::NvmeDir;

// Every unit's state as bytes, through the tier where it holds it.
struct Snapshot {
  std::vector<std::vector<char>> master, m, v, shadow;
};

template <typename S>
Snapshot snapshot_as(HostStore& store) {
  Snapshot s;
  for (size_t u = 0; u < store.num_units(); ++u) {
    auto st = store.acquire<S>(u);
    EXPECT_TRUE(st.ok()) << st.status().to_string();
    if (!st.ok()) return s;
    const size_t n = store.unit(u).numel;
    auto bytes = [](const void* p, size_t b) {
      const char* c = static_cast<const char*>(p);
      return c ? std::vector<char>(c, c + b) : std::vector<char>();
    };
    s.master.push_back(bytes(st->master, n * sizeof(float)));
    s.m.push_back(bytes(st->m, n * sizeof(S)));
    s.v.push_back(bytes(st->v, n * sizeof(S)));
    s.shadow.push_back(bytes(st->shadow, n * sizeof(bf16)));
    store.release(u, false);
  }
  return s;
}

Snapshot snapshot(HostStore& store) {
  return store.layout() == MemoryLayout::kExact ? snapshot_as<float>(store) : snapshot_as<bf16>(store);
}

void expect_same(const Snapshot& a, const Snapshot& b) {
  ASSERT_EQ(a.master.size(), b.master.size());
  for (size_t u = 0; u < a.master.size(); ++u) {
    EXPECT_TRUE(a.master[u] == b.master[u]) << "master of unit " << u;
    EXPECT_TRUE(a.m[u] == b.m[u]) << "adam m of unit " << u;
    EXPECT_TRUE(a.v[u] == b.v[u]) << "adam v of unit " << u;
    EXPECT_TRUE(a.shadow[u] == b.shadow[u]) << "bf16 shadow of unit " << u;
  }
}

struct Case {
  const char* name;
  MemoryLayout layout = MemoryLayout::kExact;
  Precision precision = Precision::kFp32;
  bool masters = false;
  int devices = 1;
  int window = 3;
  const char* moe = nullptr;  // tests/engine/moe_models.h
  bool update_during_backward = false;
  int grad_window = 0;  // the tiered units' gradients in this many shared buffers
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

ModelConfig config_of(const Case& c) {
  if (c.moe) return testing_util::moe_model(c.moe);
  return testing_util::test_model_config({"LlamaForCausalLM", 32, 4, 4, 2, 48, 64, false});
}

TrainOptions options_of(const Case& c) {
  TrainOptions o;
  o.seq_len = 12;
  o.micro_batch = 2;
  o.global_batch = 4;
  o.layout = c.layout;
  o.precision = c.precision;
  o.optimizer.lr = 3e-3f;
  o.optimizer.grad_clip = c.update_during_backward ? 0.0f : 1.5f;  // clips the early steps, not the later ones
  o.schedule = {1, LrDecay::kCosine, 0.1f, 6};
  return o;
}

Result<std::unique_ptr<Executor>> make(const Case& c, const StreamingOptions& so) {
  const ModelConfig cfg = config_of(c);
  const TrainOptions opt = options_of(c);
  if (c.devices == 1) {
    MT_ASSIGN_OR_RETURN(auto e, StreamingExecutor::create(cfg, opt, so, make_cpu_backend({})));
    return std::unique_ptr<Executor>(std::move(e));
  }
  std::vector<std::unique_ptr<Backend>> backends;
  for (int d = 0; d < c.devices; ++d) backends.push_back(make_cpu_backend({}));
  MT_ASSIGN_OR_RETURN(auto e, DataParallelExecutor::create(cfg, opt, so, std::move(backends)));
  return std::unique_ptr<Executor>(std::move(e));
}

class NvmeOffload : public ::testing::TestWithParam<Case> {};

TEST_P(NvmeOffload, TheSameBitsAsInMemory) {
  const Case& c = GetParam();
  NvmeDir a("offload-a"), b("offload-b");
  StreamingOptions ram, tiered;
  ram.update_during_backward = tiered.update_during_backward = c.update_during_backward;
  tiered.nvme.paths = {a.path, b.path};
  tiered.nvme.masters = c.masters;
  tiered.nvme.window = c.window;
  tiered.nvme.chunk_bytes = 4 * kDirectAlign;
  tiered.nvme.grad_window = c.grad_window;
  auto x = make(c, ram);
  auto y = make(c, tiered);
  ASSERT_TRUE(x.ok()) << x.status().to_string();
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  HostStore& sx = (*x)->store();
  HostStore& sy = (*y)->store();
  ASSERT_NE(sy.tier(), nullptr);
  const auto units = build_param_schemas(config_of(c));
  for (size_t u = 0; u < sy.num_units(); ++u) {  // the decoders and experts; what it holds is not in memory
    EXPECT_EQ(sy.unit(u).tiered, nvme_tiered(units[u])) << "unit " << u;
    if (sy.unit(u).tiered) {
      EXPECT_EQ(sy.unit(u).m, nullptr);
      EXPECT_EQ(sy.unit(u).master == nullptr, c.masters);
      EXPECT_EQ(sy.unit(u).grad == nullptr, c.grad_window > 0) << "unit " << u;
    }
  }
  if (c.grad_window > 0) {  // a few shared gradient buffers instead of one per tiered unit
    ASSERT_NE(sy.grad_window(), nullptr);
    EXPECT_EQ(sy.grad_window()->buffers(), size_t(c.grad_window));
    StreamingOptions whole = tiered;
    whole.nvme.grad_window = 0;
    auto w = make(c, whole);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    EXPECT_LT(sy.total_bytes(), (*w)->store().total_bytes());
  }
  const ModelConfig cfg = config_of(c);
  init_weights(cfg, sx, 11);
  init_weights(cfg, sy, 11);
  expect_same(snapshot(sx), snapshot(sy));
  const TrainOptions opt = options_of(c);
  auto src = make_synthetic_source({5, cfg.vocab_size, 32, 3});
  Batch batch;
  int clipped = 0, steps = 5;
  for (int s = 0; s < steps; ++s) {
    ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, batch).ok());
    auto rx = (*x)->step(batch);
    auto ry = (*y)->step(batch);
    ASSERT_TRUE(rx.ok()) << rx.status().to_string();
    ASSERT_TRUE(ry.ok()) << ry.status().to_string();
    EXPECT_EQ(rx->loss, ry->loss) << "step " << s;
    EXPECT_EQ(rx->grad_norm, ry->grad_norm) << "step " << s;
    clipped += rx->clipped;
  }
  if (!c.update_during_backward) {
    EXPECT_GT(clipped, 0) << "some step must clip";
    EXPECT_LT(clipped, steps) << "some step must not clip";
  }
  ASSERT_TRUE((*x)->sync().ok());
  ASSERT_TRUE((*y)->sync().ok());
  expect_same(snapshot(sx), snapshot(sy));
  EXPECT_GT(sy.tier()->bytes_written(), 0u);
  EXPECT_GT(sy.tier()->bytes_read(), 0u);

  // Checkpoints: the tiered one reads the drives, and holds the in-memory one's bytes.
  NvmeDir cx("ckpt-ram"), cy("ckpt-tier");
  TrainerState state;
  state.step = steps;
  ASSERT_TRUE(save_checkpoint(cx.path, cfg, sx, state, 1).ok());
  auto saved = save_checkpoint(cy.path, cfg, sy, state, 1);
  ASSERT_TRUE(saved.ok()) << saved.status().to_string();
  auto bytes = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(f), {});
  };
  for (const char* file : {"/model.safetensors", "/optimizer.safetensors"}) {
    const auto want = bytes(checkpoint_step_dir(cx.path, steps) + file);
    EXPECT_FALSE(want.empty()) << file;
    EXPECT_TRUE(want == bytes(*saved + file)) << file << " differs";
  }
  // A fresh tiered executor resumed from it: the same state, and the same next steps.
  auto z = make(c, tiered);
  ASSERT_TRUE(z.ok()) << z.status().to_string();
  init_weights(cfg, (*z)->store(), 99);  // overwritten by the load, drives included
  auto loaded = load_checkpoint(*saved, cfg, (*z)->store());
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  expect_same(snapshot(sx), snapshot((*z)->store()));
  (*z)->set_steps_done(loaded->step);
  for (int s = 0; s < 2; ++s) {
    ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, batch).ok());
    auto rx = (*x)->step(batch);
    auto rz = (*z)->step(batch);
    ASSERT_TRUE(rx.ok()) << rx.status().to_string();
    ASSERT_TRUE(rz.ok()) << rz.status().to_string();
    EXPECT_EQ(rx->loss, rz->loss) << "resumed step " << s;
  }
  ASSERT_TRUE((*x)->sync().ok());
  ASSERT_TRUE((*z)->sync().ok());
  expect_same(snapshot(sx), snapshot((*z)->store()));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, NvmeOffload,
    ::testing::Values(Case{"ExactFp32"}, Case{"CompactFp32", MemoryLayout::kCompact},
                      Case{"CompactBf16Masters", MemoryLayout::kCompact, Precision::kBf16, true},
                      Case{"ExactBf16Masters", MemoryLayout::kExact, Precision::kBf16, true},
                      Case{"TwoDevices", MemoryLayout::kCompact, Precision::kBf16, true, 2},
                      Case{"WindowOfOne", MemoryLayout::kExact, Precision::kFp32, false, 1, 1},
                      Case{"UpdatedAsLanded", MemoryLayout::kExact, Precision::kFp32, false, 1, 2, nullptr, true},
                      Case{"MixtureOfExperts", MemoryLayout::kCompact, Precision::kBf16, true, 1, 3, "qwen3_moe"},
                      Case{"GradWindowOfTwo", MemoryLayout::kCompact, Precision::kBf16, true, 1, 3, nullptr, true, 2},
                      Case{"GradWindowOfOne", MemoryLayout::kExact, Precision::kFp32, false, 1, 1, nullptr, true, 1},
                      Case{"GradWindowMixtureOfExperts", MemoryLayout::kCompact, Precision::kBf16, true, 1, 3, "qwen3_moe",
                           true, 2}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

TEST(NvmeOffloadFailure, AnIoErrorInAStepFailsItNamingThePathAndTheUnit) {
  NvmeDir a("offload-fail");
  const Case c{"x"};
  StreamingOptions so;
  so.nvme.paths = {a.path};
  so.nvme.chunk_bytes = kDirectAlign;
  auto e = make(c, so);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  const ModelConfig cfg = config_of(c);
  init_weights(cfg, (*e)->store(), 3);
  auto src = make_synthetic_source({5, cfg.vocab_size, 32, 3});
  Batch batch;
  const TrainOptions opt = options_of(c);
  ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, batch).ok());
  ASSERT_TRUE((*e)->step(batch).ok());
  ASSERT_TRUE((*e)->sync().ok());
  (*e)->store().tier()->inject_io_error(10);  // in the middle of the next step's updates
  Status failed;
  for (int s = 0; s < 3 && failed.ok(); ++s) {
    ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, batch).ok());
    auto r = (*e)->step(batch);
    failed = r.ok() ? (*e)->sync() : r.status();
  }
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.message().find(a.path), std::string::npos) << failed.to_string();
  EXPECT_NE(failed.message().find("decoder "), std::string::npos) << failed.to_string();
  EXPECT_NE(failed.message().find("Input/output error"), std::string::npos) << failed.to_string();
  EXPECT_FALSE((*e)->sync().ok());  // and stays failed
}

TEST(NvmeOffloadRefusals, WhatTheTierCannotHold) {
  NvmeDir a("offload-refuse");
  const Case c{"x"};
  const ModelConfig cfg = config_of(c);
  TrainOptions opt = options_of(c);
  StreamingOptions so;
  so.nvme.paths = {a.path};
  so.nvme.masters = true;  // fp32 uploads read the masters
  auto e = StreamingExecutor::create(cfg, opt, so, make_cpu_backend({}));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("nvme_masters needs precision bf16"), std::string::npos) << e.status().to_string();
  so.nvme.masters = false;
  so.speculation = Speculation::kOn;  // restore copies of the moments
  e = StreamingExecutor::create(cfg, opt, so, make_cpu_backend({}));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("speculative_updates"), std::string::npos) << e.status().to_string();
}

}  // namespace
}  // namespace mt

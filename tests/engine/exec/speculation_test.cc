// Speculative updates (planner.h Speculation, streaming_pipeline.h): units updated as their
// gradients land, before the norm is known, restored and updated again when clipping scales
// the step — bit for bit the plain schedule (losses, masters, both moments, bf16 shadows),
// whether clipping is never, sometimes or always active, in both layouts and precisions, on one
// device and two; the plan counts the restore copies and falls back within a host budget.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ostream>

#include "engine/exec/data_parallel_executor.h"
#include "engine/exec/streaming_executor.h"
#include "tests/engine/test_model.h"

namespace mt {
namespace {

ModelConfig spec_config(bool tied) {
  return testing_util::test_model_config({"LlamaForCausalLM", 32, 3, 4, 2, 48, 64, tied});
}

TrainOptions spec_options(float grad_clip, MemoryLayout layout, Precision precision) {
  TrainOptions o;
  o.seq_len = 24;
  o.micro_batch = 2;
  o.global_batch = 4;
  o.optimizer.lr = 3e-3f;
  o.optimizer.grad_clip = grad_clip;
  o.schedule = {1, LrDecay::kCosine, 0.1f, 6};
  o.layout = layout;
  o.precision = precision;
  return o;
}

struct Trainer {
  std::unique_ptr<Executor> ex;
  StreamingExecutor* leader = nullptr;
};

Trainer make_run(const ModelConfig& cfg, const TrainOptions& opt, Speculation sp, int devices) {
  StreamingOptions so;
  so.speculation = sp;
  Trainer r;
  if (devices == 1) {
    auto e = StreamingExecutor::create_cpu(cfg, opt, so);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    r.leader = e->get();
    r.ex = std::move(e).value();
  } else {
    std::vector<std::unique_ptr<Backend>> b;
    for (int d = 0; d < devices; ++d) b.push_back(make_cpu_backend({}));
    auto e = DataParallelExecutor::create(cfg, opt, so, std::move(b));
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    r.leader = &(*e)->replica(0);
    r.ex = std::move(e).value();
  }
  init_weights(cfg, r.ex->store(), 5);
  return r;
}

void expect_same_state(const HostStore& a, const HostStore& b) {
  const size_t se = state_elem_bytes(a.layout());
  for (size_t u = 0; u < a.num_units(); ++u) {
    const HostUnit &x = a.unit(u), &y = b.unit(u);
    EXPECT_EQ(0, std::memcmp(x.master, y.master, x.numel * sizeof(float))) << "master of unit " << u;
    EXPECT_EQ(0, std::memcmp(x.m, y.m, x.numel * se)) << "adam m of unit " << u;
    EXPECT_EQ(0, std::memcmp(x.v, y.v, x.numel * se)) << "adam v of unit " << u;
    if (x.shadow) {
      EXPECT_EQ(0, std::memcmp(x.shadow, y.shadow, x.numel * sizeof(bf16))) << "shadow of unit " << u;
    }
  }
}

enum class Clipping { kNever, kSometimes, kAlways };
struct Case {
  const char* name;
  Clipping clipping;
  MemoryLayout layout = MemoryLayout::kExact;
  Precision precision = Precision::kFp32;
  int devices = 1;
  bool tied = false;
  Speculation speculation = Speculation::kOn;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class SpeculativeUpdates : public ::testing::TestWithParam<Case> {};

TEST_P(SpeculativeUpdates, EqualThePlainScheduleBitForBit) {
  const Case& c = GetParam();
  const ModelConfig cfg = spec_config(c.tied);
  // "Sometimes": a clip between the small and large norms of this run (early steps clip).
  const float clip = c.clipping == Clipping::kNever ? 1e9f : c.clipping == Clipping::kAlways ? 1e-4f : 1.42f;
  const TrainOptions opt = spec_options(clip, c.layout, c.precision);
  Trainer plain = make_run(cfg, opt, Speculation::kOff, c.devices), spec = make_run(cfg, opt, c.speculation, c.devices);
  EXPECT_EQ(plain.leader->plan().speculative_units, 0);
  EXPECT_EQ(spec.leader->plan().speculative_units, cfg.num_layers + 1) << spec.leader->plan().speculation;
  auto src = make_synthetic_source({3, cfg.vocab_size, 32, 3});
  Batch b;
  int clipped = 0;
  const int steps = 6;
  for (int s = 0; s < steps; ++s) {
    ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, b).ok());
    auto r1 = plain.ex->step(b);
    auto r2 = spec.ex->step(b);
    ASSERT_TRUE(r1.ok() && r2.ok()) << r2.status().to_string();
    EXPECT_EQ(r1->loss, r2->loss) << "step " << s + 1;
    EXPECT_EQ(r1->grad_norm, r2->grad_norm) << "step " << s + 1;
    EXPECT_EQ(r1->clipped, r2->clipped);
    if (std::getenv("MT_PRINT_NORMS")) std::printf("norm %g\n", r1->grad_norm);
    clipped += r1->clipped;
  }
  ASSERT_TRUE(plain.ex->sync().ok() && spec.ex->sync().ok());
  expect_same_state(plain.ex->store(), spec.ex->store());
  const long speculated = spec.leader->pipeline().speculated_updates(), undone = spec.leader->pipeline().rolled_back_updates();
  const long units = cfg.num_layers + 1;  // all but the embedding
  switch (c.clipping) {
    case Clipping::kNever:
      EXPECT_EQ(clipped, 0);
      EXPECT_EQ(speculated, steps * units);
      EXPECT_EQ(undone, 0);
      break;
    case Clipping::kAlways:
      EXPECT_EQ(clipped, steps);
      // on: every speculation rolled back; auto: only the first step speculates.
      EXPECT_EQ(speculated, c.speculation == Speculation::kOn ? steps * units : units);
      EXPECT_EQ(undone, speculated);
      break;
    case Clipping::kSometimes:
      EXPECT_GT(clipped, 0) << "the case needs clipped steps";
      EXPECT_LT(clipped, steps) << "and steps that do not clip";
      EXPECT_GT(undone, 0);
      EXPECT_LT(undone, speculated);
      break;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cpu, SpeculativeUpdates,
    ::testing::Values(Case{"never", Clipping::kNever}, Case{"sometimes", Clipping::kSometimes},
                      Case{"always", Clipping::kAlways},
                      Case{"always_auto", Clipping::kAlways, MemoryLayout::kExact, Precision::kFp32, 1, false,
                           Speculation::kAuto},
                      Case{"sometimes_auto_tied", Clipping::kSometimes, MemoryLayout::kExact, Precision::kFp32, 1, true,
                           Speculation::kAuto},
                      Case{"sometimes_compact", Clipping::kSometimes, MemoryLayout::kCompact},
                      Case{"sometimes_bf16", Clipping::kSometimes, MemoryLayout::kExact, Precision::kBf16},
                      Case{"always_compact_bf16", Clipping::kAlways, MemoryLayout::kCompact, Precision::kBf16},
                      Case{"sometimes_devices2", Clipping::kSometimes, MemoryLayout::kExact, Precision::kFp32, 2},
                      Case{"always_devices2_bf16_tied", Clipping::kAlways, MemoryLayout::kExact, Precision::kBf16, 2,
                           true}),
    [](const auto& info) { return std::string(info.param.name); });

// grad_clip 0: every unit updates as it lands, with no restore copy; still the same bits.
TEST(SpeculativeUpdates, WithoutClippingEveryUnitUpdatesAsItLandsWithNoCopies) {
  const ModelConfig cfg = spec_config(false);
  const TrainOptions opt = spec_options(0, MemoryLayout::kExact, Precision::kFp32);
  Trainer plain = make_run(cfg, opt, Speculation::kOff, 1), spec = make_run(cfg, opt, Speculation::kAuto, 1);
  EXPECT_TRUE(spec.leader->plan().update_as_landed);
  EXPECT_EQ(plain.leader->plan().host_bytes, spec.leader->plan().host_bytes) << "no restore copies";
  auto src = make_synthetic_source({3, cfg.vocab_size, 32, 3});
  Batch b;
  for (int s = 0; s < 4; ++s) {
    ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, b).ok());
    auto r1 = plain.ex->step(b);
    auto r2 = spec.ex->step(b);
    ASSERT_TRUE(r1.ok() && r2.ok());
    EXPECT_EQ(r1->loss, r2->loss);
  }
  ASSERT_TRUE(plain.ex->sync().ok() && spec.ex->sync().ok());
  expect_same_state(plain.ex->store(), spec.ex->store());
}

// A step that fails after units have speculated (a device fault late in its backward, held back
// until the head and the last decoder have speculated) applies nothing: every speculated unit is
// restored, so masters, moments and shadows are exactly what they were before the step.
TEST(SpeculativeUpdates, AFailedStepRestoresWhatItSpeculated) {
  const ModelConfig cfg = spec_config(false);
  const TrainOptions opt = spec_options(1.0f, MemoryLayout::kExact, Precision::kBf16);
  StreamingExecutor* self = nullptr;
  std::atomic<long> ops{0}, fault_at{-1}, speculated_base{0};
  CpuBackendOptions bo;
  std::atomic<long> faulted_at{0};
  bo.inject_fault = [&](const char*) {
    const long n = ++ops;
    if (fault_at.load() < 0 || faulted_at.load() > 0) return false;
    // Among step 2's last ops, or as soon as the head and decoder 3 have speculated.
    if (n < fault_at.load() && self->pipeline().speculated_updates() < 2 + speculated_base.load()) return false;
    for (int i = 0; i < 30000 && self->pipeline().speculated_updates() < 2 + speculated_base.load(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    faulted_at = n;
    return true;
  };
  StreamingOptions so;
  so.speculation = Speculation::kOn;
  auto ex = StreamingExecutor::create(cfg, opt, so, make_cpu_backend(bo));
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  self = ex->get();
  init_weights(cfg, (*ex)->store(), 5);
  auto src = make_synthetic_source({3, cfg.vocab_size, 32, 3});
  Batch b;
  ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, b).ok());
  ASSERT_TRUE((*ex)->step(b).ok());
  ASSERT_TRUE((*ex)->sync().ok());
  const long per_step = ops.load();
  const long speculated_before = self->pipeline().speculated_updates();
  speculated_base = speculated_before;
  const long undone_before = self->pipeline().rolled_back_updates();
  // A copy of the state after step 1, in a second store.
  auto copy = HostStore::create(build_param_schemas(cfg), opt.layout, true, default_host_allocator());
  ASSERT_TRUE(copy.ok());
  for (size_t u = 0; u < (*ex)->store().num_units(); ++u) {
    const HostUnit &from = (*ex)->store().unit(u), &to = (*copy)->unit(u);
    std::memcpy(to.master, from.master, from.numel * sizeof(float));
    std::memcpy(to.m, from.m, from.numel * sizeof(float));
    std::memcpy(to.v, from.v, from.numel * sizeof(float));
    std::memcpy(to.shadow, from.shadow, from.numel * sizeof(bf16));
  }
  fault_at = per_step + per_step - 4;  // step 2, among its last ops (the lowest decoder's backward)
  ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, b).ok());
  auto r = (*ex)->step(b);
  ASSERT_FALSE(r.ok());
  (void)(*ex)->sync();
  EXPECT_GE(self->pipeline().speculated_updates() - speculated_before, 2)
      << "the head and a decoder speculated; fault at op " << faulted_at << " of " << 2 * per_step;
  EXPECT_EQ(self->pipeline().rolled_back_updates() - undone_before,
            self->pipeline().speculated_updates() - speculated_before);
  expect_same_state(**copy, (*ex)->store());
}

// The plan counts the restore copies (masters + both moments: 12 B/param exact, 8 compact); a
// host budget with room for only some of them speculates those (decoders first), and one with
// room for none falls back to the plain schedule, saying so.
TEST(SpeculativeUpdates, ThePlanCountsTheCopiesAndFallsBackWithinTheHostBudget) {
  const ModelConfig cfg = spec_config(false);
  for (MemoryLayout layout : {MemoryLayout::kExact, MemoryLayout::kCompact}) {
    const TrainOptions opt = spec_options(1.0f, layout, Precision::kFp32);
    PlanOptions po;
    auto off = plan_memory(cfg, opt, po);
    po.speculation = Speculation::kAuto;
    auto all = plan_memory(cfg, opt, po);
    ASSERT_TRUE(off.ok() && all.ok());
    const auto units = build_param_schemas(cfg);
    uint64_t speculated_params = 0;
    for (size_t u = 1; u < units.size(); ++u) speculated_params += units[u].numel;
    const uint64_t per = layout == MemoryLayout::kExact ? 12 : 8;
    EXPECT_EQ(all->host_bytes, off->host_bytes + speculated_params * per);
    EXPECT_EQ(all->speculative_units, cfg.num_layers + 1);
    // Room for decoder 1's copy only.
    po.host_budget = off->host_bytes + units[1].numel * per + 1;
    auto some = plan_memory(cfg, opt, po);
    ASSERT_TRUE(some.ok());
    EXPECT_TRUE(some->fits);
    EXPECT_EQ(some->speculative_units, 1);
    EXPECT_NE(some->speculation.find("no room"), std::string::npos) << some->speculation;
    po.host_budget = off->host_bytes;
    auto none = plan_memory(cfg, opt, po);
    ASSERT_TRUE(none.ok());
    EXPECT_TRUE(none->fits);
    EXPECT_EQ(none->speculative_units, 0);
    EXPECT_EQ(none->host_bytes, off->host_bytes);
  }
  // Sharded over processes: off, with the reason.
  PlanOptions sharded;
  sharded.speculation = Speculation::kOn;
  sharded.processes = 2;
  sharded.shard_optimizer = true;
  auto p = plan_memory(cfg, spec_options(1.0f, MemoryLayout::kExact, Precision::kFp32), sharded);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->speculative_units, 0);
  EXPECT_NE(p->speculation.find("sharded"), std::string::npos);
}

}  // namespace
}  // namespace mt

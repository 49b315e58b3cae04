// devices: N in one process (DataParallelExecutor) against one device (StreamingExecutor) at the
// same global batch, on the CPU backend: one HostStore whatever N; devices: 1 through the data-
// parallel path is bit for bit the plain executor; N > 1 is reproducible bit for bit and within
// a stated fp32 bound of one device (the micro-batch sum is associated per device; see
// data_parallel_executor.h); a device that fails ends the step with an error naming it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ostream>

#include "engine/data/data_source.h"
#include "engine/exec/data_parallel_executor.h"
#include "engine/job/job_spec.h"
#include "tests/engine/data_parallel_fixture.h"

namespace mt {
namespace {

struct Case {
  const char* name;
  int devices;
  bool tied;
  CheckpointPlacement placement;
  Precision precision = Precision::kFp32;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

ModelConfig config(bool tied) { return testing_util::data_parallel_config(tied); }

TrainOptions options(Precision p) { return testing_util::data_parallel_options(p); }

std::vector<std::unique_ptr<Backend>> cpu_backends(int n, std::function<bool(const char*)> fault_on_1 = {}) {
  std::vector<std::unique_ptr<Backend>> b;
  for (int d = 0; d < n; ++d) {
    CpuBackendOptions o;
    if (d == 1) o.inject_fault = fault_on_1;
    b.push_back(make_cpu_backend(o));
  }
  return b;
}

StreamingOptions streaming(CheckpointPlacement p) {
  StreamingOptions so;
  so.placement = p;
  return so;
}


bool same_masters(const HostStore& a, const HostStore& b) {
  for (size_t u = 0; u < a.num_units(); ++u)
    if (std::memcmp(a.unit(u).master, b.unit(u).master, a.unit(u).numel * sizeof(float)) != 0) return false;
  return true;
}

class DataParallel : public ::testing::TestWithParam<Case> {};

// Bound: each device sums its micro-batches' weight gradients from zero, and the devices' sums
// are then added; one device adds them all in one chain. The two differ by fp32 rounding of the
// gradient (~1e-7 relative), which AdamW's normalisation can amplify for elements whose gradient
// is near zero; over 5 steps at lr 3e-3 the weights move by < 1.5e-2 and agree to 1e-4 relative
// (measured: ~1e-5). The loss agrees to 1e-5 relative; step 1's loss exactly (same weights,
// micro-batch sums in global order). In bf16 a master that differs in its last fp32 bits can
// round to a neighbouring bf16 shadow, so differences grow to bf16's resolution: 2e-2 relative on
// the weights (measured 3e-3), 1e-4 on the loss.
TEST_P(DataParallel, EqualsOneDeviceAtTheSameGlobalBatch) {
  const Case& c = GetParam();
  const ModelConfig cfg = config(c.tied);
  const TrainOptions opt = options(c.precision);
  const bool bf16 = c.precision == Precision::kBf16;
  auto one = StreamingExecutor::create(cfg, opt, streaming(c.placement), make_cpu_backend({}));
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  auto dp = DataParallelExecutor::create(cfg, opt, streaming(c.placement), cpu_backends(c.devices));
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
    if (s == 0) {
      EXPECT_EQ(r1->loss, rn->loss);
    }
    EXPECT_NEAR(r1->loss, rn->loss, (bf16 ? 1e-4 : 1e-5) * r1->loss) << "step " << s;
    EXPECT_EQ(rn->tokens, r1->tokens);
  }
  ASSERT_TRUE((*one)->sync().ok());
  ASSERT_TRUE((*dp)->sync().ok());
  const double rel = testing_util::max_master_rel_diff((*dp)->store(), (*one)->store());
  EXPECT_LT(rel, bf16 ? 2e-2 : 1e-4);
  std::printf("devices %d: largest relative master difference to devices 1 after 5 steps: %.3g\n", c.devices, rel);
  // One store, whatever N: every replica trains the leader's; its bytes are those of one device's.
  for (int d = 0; d < c.devices; ++d) EXPECT_EQ(&(*dp)->replica(d).store(), &(*dp)->store());
  EXPECT_EQ((*dp)->store().total_bytes(), (*one)->store().total_bytes());
}

INSTANTIATE_TEST_SUITE_P(
    Cpu, DataParallel,
    ::testing::Values(Case{"devices2_untied_device", 2, false, CheckpointPlacement::kDevice},
                      Case{"devices4_untied_device", 4, false, CheckpointPlacement::kDevice},
                      Case{"devices2_tied_host", 2, true, CheckpointPlacement::kHost},
                      Case{"devices4_tied_host", 4, true, CheckpointPlacement::kHost},
                      Case{"devices2_bf16_tied_device", 2, true, CheckpointPlacement::kDevice, Precision::kBf16}),
    [](const auto& info) { return std::string(info.param.name); });

// devices: 1 through the data-parallel path is the plain executor, bit for bit; N = 2 twice gives
// the same bits (the reduction order is fixed).
TEST(DataParallelExact, OneDeviceIsThePlainExecutorAndTwoAreReproducible) {
  const ModelConfig cfg = config(false);
  const TrainOptions opt = options(Precision::kFp32);
  auto plain = StreamingExecutor::create(cfg, opt, {}, make_cpu_backend({}));
  auto one = DataParallelExecutor::create(cfg, opt, {}, cpu_backends(1));
  auto two_a = DataParallelExecutor::create(cfg, opt, {}, cpu_backends(2));
  auto two_b = DataParallelExecutor::create(cfg, opt, {}, cpu_backends(2));
  ASSERT_TRUE(plain.ok() && one.ok() && two_a.ok() && two_b.ok());
  std::vector<Executor*> all = {plain->get(), one->get(), two_a->get(), two_b->get()};
  for (Executor* e : all) init_weights(cfg, e->store(), 9);
  auto src = make_synthetic_source({5, cfg.vocab_size, 32, 3});
  Batch b;
  for (int s = 0; s < 3; ++s) {
    ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, b).ok());
    std::vector<double> loss;
    for (Executor* e : all) {
      auto r = e->step(b);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      loss.push_back(r->loss);
    }
    EXPECT_EQ(loss[0], loss[1]);
    EXPECT_EQ(loss[2], loss[3]);
  }
  for (Executor* e : all) ASSERT_TRUE(e->sync().ok());
  EXPECT_TRUE(same_masters(plain->get()->store(), one->get()->store()));
  EXPECT_TRUE(same_masters(two_a->get()->store(), two_b->get()->store()));
  EXPECT_FALSE(same_masters(plain->get()->store(), two_a->get()->store()))
      << "if N = 2 became bit-identical to N = 1, tighten EqualsOneDeviceAtTheSameGlobalBatch";
}

// Device 1 faults mid-step: the step fails within the stated bound (well under the 300 s
// collective timeout: the failed rank aborts the group) with an error naming it, and no update
// of that step is applied to the one store.
TEST(DataParallelFailure, AFailedDeviceEndsTheStepNamingIt) {
  const ModelConfig cfg = config(false);
  const TrainOptions opt = options(Precision::kFp32);
  std::atomic<int> ops{0};
  std::atomic<bool> armed{false};
  auto dp = DataParallelExecutor::create(cfg, opt, {}, cpu_backends(2, [&](const char*) { return armed && ++ops > 40; }));
  ASSERT_TRUE(dp.ok()) << dp.status().to_string();
  init_weights(cfg, (*dp)->store(), 9);
  auto src = make_synthetic_source({5, cfg.vocab_size, 32, 3});
  Batch b;
  ASSERT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, b).ok());
  ASSERT_TRUE((*dp)->step(b).ok());
  ASSERT_TRUE((*dp)->sync().ok());
  std::vector<float> before((*dp)->store().unit(1).master, (*dp)->store().unit(1).master + (*dp)->store().unit(1).numel);
  armed = true;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = (*dp)->step(b);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("rank 1 failed"), std::string::npos) << r.status().to_string();
  EXPECT_LT(took, 30.0);
  EXPECT_FALSE((*dp)->sync().ok());
  // A later step fails at once (the failed device aborts the group), not at the 300 s timeout.
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_FALSE((*dp)->step(b).ok());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 30.0);
  EXPECT_EQ(0, std::memcmp(before.data(), (*dp)->store().unit(1).master, before.size() * sizeof(float)))
      << "an update was applied from the failed step";
}

TEST(DataParallelRefusals, AGlobalBatchThatDoesNotSplitIsRefused) {
  TrainOptions o = options(Precision::kFp32);
  o.global_batch = 6;  // 3 micro-batches over 2 devices
  auto dp = DataParallelExecutor::create(config(false), o, {}, cpu_backends(2));
  ASSERT_FALSE(dp.ok());
  EXPECT_NE(dp.status().message().find("multiple of 4"), std::string::npos) << dp.status().to_string();
}

}  // namespace
}  // namespace mt

namespace mt {
namespace {

// The plan of devices: N: the host store's bytes are those of one device whatever N; each
// device's own bytes shrink with its share of the batch (its layer inputs).
TEST(DataParallelPlan, HostStoreOnceDeviceBytesPerDevice) {
  const ModelConfig cfg = config(true);
  const TrainOptions opt = options(Precision::kFp32);
  std::vector<MemoryPlan> plans;
  for (int n : {1, 2, 4}) {
    PlanOptions po;
    po.devices = n;
    po.placement = CheckpointPlacement::kDevice;
    auto p = plan_memory(cfg, opt, po);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_EQ(p->devices, n);
    plans.push_back(*p);
  }
  auto kind = [](const MemoryPlan& p, const std::string& k) {
    for (const auto& [name, b] : p.host_by_kind)
      if (name == k) return b;
    return uint64_t(0);
  };
  for (const char* k : {"master", "grad", "adam_m", "adam_v", "tied_head_grad", "loss_totals"}) {
    EXPECT_GT(kind(plans[0], k), 0u) << k;
    EXPECT_EQ(kind(plans[1], k), kind(plans[0], k)) << k;
    EXPECT_EQ(kind(plans[2], k), kind(plans[0], k)) << k;
  }
  EXPECT_EQ(kind(plans[2], "embedding_rows"), 4 * kind(plans[0], "embedding_rows"));  // staged per device
  EXPECT_LT(plans[1].device_bytes, plans[0].device_bytes);
  EXPECT_LT(plans[2].device_bytes, plans[1].device_bytes);
  PlanOptions bad;
  bad.devices = 3;  // 4 micro-batches do not split 3 ways
  EXPECT_FALSE(plan_memory(cfg, opt, bad).ok());
}

// The spec's devices: parsed, refused when the batch does not split, and not in the trajectory
// hash (a checkpoint resumes on another device count).
TEST(DataParallelSpec, DevicesParsedCheckedAndNotHashed) {
  auto parse = [](const std::string& extra) {
    return job_spec_from_json(*Json::parse(R"({"model": {"preset": "tiny"}, "micro_batch": 2, "global_batch": 8)" + extra + "}"));
  };
  auto one = parse("");
  auto two = parse(R"(, "devices": 2, "comm_timeout_seconds": 9)");
  ASSERT_TRUE(one.ok() && two.ok()) << two.status().to_string();
  EXPECT_EQ(two->devices, 2);
  EXPECT_EQ(two->comm_timeout_seconds, 9);
  EXPECT_EQ(job_spec_hash(*one), job_spec_hash(*two));
  auto back = job_spec_from_json(job_spec_to_json(*two));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->devices, 2);
  auto bad = parse(R"(, "devices": 3)");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("devices = 3"), std::string::npos) << bad.status().to_string();
  EXPECT_FALSE(parse(R"(, "devices": 0)").ok());
  EXPECT_FALSE(parse(R"(, "comm_timeout_seconds": 0)").ok());
}

}  // namespace
}  // namespace mt

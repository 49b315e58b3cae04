// The optimizer sharded over processes (engine/optim/optimizer_shards.h), everything but the MPI
// run itself (tests/mpi/train_mpi_check.sh sharded*): the owners, the host bytes each process
// holds, the plan, the spec, and a sharded checkpoint written by two stores and read back whole,
// per rank and on another process count.
#include <gtest/gtest.h>

#include <filesystem>
#include <cstring>
#include <random>

#include "engine/base/json.h"
#include "engine/exec/planner.h"
#include "engine/io/checkpoint.h"
#include "engine/job/job_spec.h"
#include "engine/model/model_config.h"
#include "engine/optim/optimizer_shards.h"

#include "tests/engine/temp_dir.h"

namespace mt {
namespace {

ModelConfig preset(const std::string& name) {
  auto cfg = preset_config(name);
  EXPECT_TRUE(cfg.ok()) << name;
  return *cfg;
}

// Every unit has one owner; the heaviest process exceeds the lightest by at most one unit; the
// assignment depends only on (units, processes).
TEST(DataParallelShardedOptimizer, OwnersCoverEveryUnitAndBalanceParameters) {
  for (const char* name : {"tiny", "small", "llama3-8b", "qwen2.5-7b"}) {
    const auto units = build_param_schemas(preset(name));
    size_t largest = 0;
    for (const auto& u : units) largest = std::max(largest, u.numel);
    for (int R : {1, 2, 3, 8}) {
      const auto owners = optimizer_shard_owners(units, R);
      ASSERT_EQ(owners.size(), units.size());
      EXPECT_EQ(owners, optimizer_shard_owners(units, R));
      std::vector<size_t> load(size_t(R), 0);
      for (size_t u = 0; u < units.size(); ++u) {
        ASSERT_GE(owners[u], 0);
        ASSERT_LT(owners[u], R);
        load[size_t(owners[u])] += units[u].numel;
      }
      const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
      EXPECT_LE(*hi - *lo, largest) << name << " over " << R;
      if (R > 1 && units.size() >= size_t(R)) {
        EXPECT_GT(*lo, 0u) << name << " over " << R;
      }
    }
  }
}

// A process's store holds m and v of its own units only: the shards' Adam bytes add up to the
// whole store's, masters and gradients stay whole everywhere.
TEST(DataParallelShardedOptimizer, EachStoreHoldsTheAdamStateOfItsUnitsOnly) {
  const auto units = build_param_schemas(preset("tiny"));
  const auto whole = host_store_bytes(units, MemoryLayout::kExact, false);
  const auto owners = optimizer_shard_owners(units, 2);
  uint64_t m = 0, v = 0;
  for (int r = 0; r < 2; ++r) {
    const auto part = host_store_bytes(units, MemoryLayout::kExact, false, moments_of_rank(owners, r));
    EXPECT_EQ(part.master, whole.master);
    EXPECT_EQ(part.grad, whole.grad);
    EXPECT_LT(part.m, whole.m);
    m += part.m, v += part.v;
    auto store = HostStore::create(units, MemoryLayout::kExact, false, default_host_allocator(), moments_of_rank(owners, r));
    ASSERT_TRUE(store.ok());
    EXPECT_EQ((*store)->total_bytes(), part.total());
    for (size_t u = 0; u < units.size(); ++u) EXPECT_EQ((*store)->has_moments(u), owners[u] == r);
  }
  EXPECT_EQ(m, whole.m);
  EXPECT_EQ(v, whole.v);
  EXPECT_FALSE(HostStore::create(units, MemoryLayout::kExact, false, default_host_allocator(), MomentUnits(2, true)).ok());
}

// The plan's host bytes are per process, the largest shard's: 16 B/param replicated, about
// 8 + 8/R sharded (exact layout, fp32).
TEST(DataParallelShardedOptimizer, PlanSaysTheHostBytesPerParameterOfEachMode) {
  const ModelConfig cfg = preset("llama3-8b");
  TrainOptions opt;
  opt.micro_batch = 1;
  opt.global_batch = 8;
  opt.seq_len = 1024;
  PlanOptions po;
  po.processes = 8;
  auto replicated = plan_memory(cfg, opt, po);
  po.shard_optimizer = true;
  auto sharded = plan_memory(cfg, opt, po);
  ASSERT_TRUE(replicated.ok() && sharded.ok());
  EXPECT_FALSE(replicated->shard_optimizer);
  EXPECT_TRUE(sharded->shard_optimizer);
  EXPECT_NEAR(replicated->host_bytes_per_param, 16.0, 0.2);
  EXPECT_NEAR(sharded->host_bytes_per_param, 8.0 + 8.0 / 8, 0.3);
  EXPECT_EQ(replicated->device_bytes, sharded->device_bytes);
  EXPECT_EQ(memory_plan_to_json(*sharded).find("processes")->as_int(), 8);
  po.processes = 3;  // 8 sequences do not split over 3 processes
  EXPECT_FALSE(plan_memory(cfg, opt, po).ok());
}

TEST(DataParallelShardedOptimizer, SpecFieldParsedCheckedAndNotHashed) {
  auto parse = [](const std::string& extra) {
    return job_spec_from_json(*Json::parse(R"({"model": {"preset": "tiny"}, "micro_batch": 2, "global_batch": 8)" + extra + "}"));
  };
  auto plain = parse("");
  auto sharded = parse(R"(, "shard_optimizer": true, "comm_timeout_seconds": 9)");
  ASSERT_TRUE(plain.ok() && sharded.ok()) << sharded.status().to_string();
  EXPECT_TRUE(sharded->shard_optimizer);
  EXPECT_EQ(job_spec_hash(*plain), job_spec_hash(*sharded));  // resumes either way
  auto back = job_spec_from_json(job_spec_to_json(*sharded));
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->shard_optimizer);
  EXPECT_EQ(back->comm_timeout_seconds, 9);
  EXPECT_TRUE(parse(R"(, "shard_optimizer": true, "memory": {"layout": "compact"})").ok());
  EXPECT_FALSE(parse(R"(, "shard_optimizer": true, "executor": "resident")").ok());
}

void fill(const HostStore& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  for (size_t u = 0; u < s.num_units(); ++u) {
    const HostUnit& h = s.unit(u);
    for (size_t i = 0; i < h.numel; ++i) h.master[i] = d(rng);
    if (!h.m) continue;
    for (size_t i = 0; i < h.numel; ++i) static_cast<float*>(h.m)[i] = d(rng), static_cast<float*>(h.v)[i] = d(rng) + 1;
  }
}

bool same_unit(const HostUnit& a, const HostUnit& b, bool moments) {
  const size_t n = a.numel * sizeof(float);
  return std::memcmp(a.master, b.master, n) == 0 && (!moments || (std::memcmp(a.m, b.m, n) == 0 && std::memcmp(a.v, b.v, n) == 0));
}

// Two processes' stores (the same masters, each its own units' Adam state) write one sharded
// checkpoint; it loads whole into one process's store and back into each rank's shard.
TEST(DataParallelShardedOptimizer, ShardedCheckpointLoadsWholeAndPerRank) {
  testing_util::TempDir dir("mt-sharded");
  const ModelConfig cfg = preset("tiny");
  const auto units = build_param_schemas(cfg);
  const auto owners = optimizer_shard_owners(units, 2);
  auto make = [&](const MomentUnits& m) {
    return std::move(HostStore::create(units, MemoryLayout::kExact, false, default_host_allocator(), m)).value();
  };
  auto full = make({});
  fill(*full, 7);  // the reference: what the two shards hold between them
  std::vector<std::unique_ptr<HostStore>> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(make(moments_of_rank(owners, r)));
    for (size_t u = 0; u < units.size(); ++u) {
      const HostUnit &src = full->unit(u), &dst = ranks.back()->unit(u);
      std::memcpy(dst.master, src.master, src.numel * sizeof(float));
      if (dst.m) std::memcpy(dst.m, src.m, src.numel * sizeof(float)), std::memcpy(dst.v, src.v, src.numel * sizeof(float));
    }
  }
  TrainerState st;
  st.step = 5;
  const std::string root = dir.path + "/ckpt";
  EXPECT_FALSE(save_checkpoint(root, cfg, *ranks[0], st, 2).ok());  // a shard alone is not a checkpoint
  ASSERT_TRUE(begin_checkpoint(root, st.step).ok());
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(write_optimizer_shard(root, st.step, cfg, *ranks[size_t(r)], r, 2).ok());
  auto published = finish_sharded_checkpoint(root, cfg, *ranks[0], st, 2, 2);
  ASSERT_TRUE(published.ok()) << published.status().to_string();
  EXPECT_EQ(*published, checkpoint_step_dir(root, 5));
  EXPECT_FALSE(std::filesystem::exists(*published + "/optimizer.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(*published + "/optimizer.safetensors.index.json"));

  auto whole = make({});
  ASSERT_TRUE(load_checkpoint(*published, cfg, *whole).ok());
  for (size_t u = 0; u < units.size(); ++u) EXPECT_TRUE(same_unit(whole->unit(u), full->unit(u), true)) << "unit " << u;
  for (int r = 0; r < 2; ++r) {
    auto mine = make(moments_of_rank(owners, r));
    ASSERT_TRUE(load_checkpoint(*published, cfg, *mine).ok());
    for (size_t u = 0; u < units.size(); ++u) EXPECT_TRUE(same_unit(mine->unit(u), full->unit(u), mine->has_moments(u)));
  }
  // And a whole checkpoint (one process) loads into a shard.
  TrainerState six;
  six.step = 6;
  ASSERT_TRUE(save_checkpoint(root, cfg, *full, six, 2).ok());
  auto mine = make(moments_of_rank(owners, 1));
  ASSERT_TRUE(load_checkpoint(checkpoint_step_dir(root, 6), cfg, *mine).ok());
  for (size_t u = 0; u < units.size(); ++u) EXPECT_TRUE(same_unit(mine->unit(u), full->unit(u), mine->has_moments(u)));
  // A shard missing (a rank failed): never published, and discarded.
  ASSERT_TRUE(begin_checkpoint(root, 7).ok());
  ASSERT_TRUE(write_optimizer_shard(root, 7, cfg, *ranks[0], 0, 2).ok());
  TrainerState seven;
  seven.step = 7;
  auto refused = finish_sharded_checkpoint(root, cfg, *ranks[0], seven, 2, 2);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("optimizer-00002-of-00002"), std::string::npos) << refused.status().to_string();
  discard_checkpoint(root, 7);
  EXPECT_FALSE(std::filesystem::exists(checkpoint_step_dir(root, 7)));
  EXPECT_FALSE(std::filesystem::exists(root + "/.tmp-step-00000007"));
}

}  // namespace
}  // namespace mt

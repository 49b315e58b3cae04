// make_executor: the executor a job runs follows the memory plan the job was admitted with
// (plan_for_job), not a plan of its own from fewer options.
#include <gtest/gtest.h>

#include "engine/exec/data_parallel_executor.h"
#include "engine/exec/streaming_executor.h"
#include "engine/job/job.h"
#include "engine/job/job_executor.h"
#include "engine/model/param_schema.h"
#include "tests/engine/job/tiny_job.h"

namespace mt {
namespace {

using testing_util::tiny_spec;

// A host budget over the job's plan without speculation with room for the first speculating
// unit's restore copy (exact layout: master + m + v, 12 bytes a parameter), a byte short of the
// second's.
uint64_t room_for_one_copy(const JobSpec& spec, const ModelConfig& cfg) {
  JobSpec off = spec;
  off.speculative_updates = "off";
  const auto base = plan_for_job(off, cfg, 0, 0);
  EXPECT_TRUE(base.ok()) << base.status().to_string();
  const auto units = build_param_schemas(cfg);
  const std::vector<int> first_two = speculative_units(cfg.num_layers, 2);
  return base->host_bytes + (units[size_t(first_two[0])].numel + units[size_t(first_two[1])].numel) * 12 - 1;
}

const StreamingExecutor& leader_of(const Executor& ex, const JobSpec& spec) {
  if (spec.devices == 1) return static_cast<const StreamingExecutor&>(ex);
  return const_cast<DataParallelExecutor&>(static_cast<const DataParallelExecutor&>(ex)).replica(0);
}

// Two devices stage the step's embedding rows twice: the job's plan counts both, and a budget
// with room for one restore copy after them speculates one unit — in the plan the daemon admits
// and reports, and in the executor that runs (which planned one device's staging alone and
// took the other's room for more copies than the host was said to hold).
TEST(JobExecutor, SpeculatesTheUnitsOfThePlanTheJobWasAdmittedWith) {
  for (int devices : {1, 2}) {
    SCOPED_TRACE("devices " + std::to_string(devices));
    JobSpec spec = tiny_spec("speculative", 1);
    spec.speculative_updates = "auto";
    spec.devices = devices;
    const ModelConfig cfg = *resolve_model(spec);
    const uint64_t budget = room_for_one_copy(spec, cfg);
    const auto planned = plan_for_job(spec, cfg, budget, 0);
    ASSERT_TRUE(planned.ok()) << planned.status().to_string();
    ASSERT_TRUE(planned->fits) << planned->reason;
    EXPECT_EQ(planned->speculative_units, 1) << planned->speculation;
    auto ex = make_executor(spec, cfg, 0, budget, {}, NodeComms{});
    ASSERT_TRUE(ex.ok()) << ex.status().to_string();
    const MemoryPlan& ran = leader_of(**ex, spec).plan();
    EXPECT_EQ(ran.speculative_units, planned->speculative_units) << ran.speculation;
    EXPECT_EQ(ran.host_bytes, planned->host_bytes);
    EXPECT_EQ(ran.device_bytes, planned->device_bytes);
  }
}

}  // namespace
}  // namespace mt

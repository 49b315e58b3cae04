// Every Ops<T> method on every CPU op table against the CPU reference in double, one test per
// row of tests/engine/backend/op_rows.h (which states the roles and the tolerances): the bare
// tables cpu_ops<float>() and cpu_ops<bf16>() on host memory, and the same tables behind
// CpuBackend (its compute stream, device arena and copy streams). tests/cuda/ops_table_test.cc
// runs the same rows on CudaBackend.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>

#include "engine/backend/backend.h"
#include "tests/engine/backend/op_rows.h"

namespace mt::optest {
namespace {

// Adding an Ops<T> method means bumping kOpCount (engine/backend/ops.h) and adding its row.
TEST(OpsTable, EveryOpHasARow) {
  std::set<std::string> ops, names;
  for (const Row& r : op_rows()) {
    ops.insert(r.op);
    EXPECT_TRUE(names.insert(std::string(r.op) + "/" + r.variant).second) << "two rows " << r.op << "/" << r.variant;
  }
  EXPECT_EQ(int(ops.size()), kOpCount) << "rows name " << ops.size() << " Ops<T> methods; kOpCount says " << kOpCount;
}

class CpuOpsTable : public ::testing::TestWithParam<size_t> {
 protected:
  static void SetUpTestSuite() {
    backend_ = make_cpu_backend({});
    memory_ = std::make_unique<BackendDevice>(*backend_);
  }
  static void TearDownTestSuite() {
    memory_.reset();
    backend_.reset();
  }
  const Row& row() const { return op_rows()[GetParam()]; }

  HostDevice host_;
  static std::unique_ptr<Backend> backend_;
  static std::unique_ptr<BackendDevice> memory_;
};
std::unique_ptr<Backend> CpuOpsTable::backend_;
std::unique_ptr<BackendDevice> CpuOpsTable::memory_;

TEST_P(CpuOpsTable, Fp32) { expect_row_matches(row(), cpu_ops<float>(), host_); }
TEST_P(CpuOpsTable, Bf16) { expect_row_matches(row(), cpu_ops<bf16>(), host_); }
TEST_P(CpuOpsTable, BackendFp32) { expect_row_matches(row(), backend_->ops<float>(), *memory_); }
TEST_P(CpuOpsTable, BackendBf16) { expect_row_matches(row(), backend_->ops<bf16>(), *memory_); }

INSTANTIATE_TEST_SUITE_P(Rows, CpuOpsTable, ::testing::Range(size_t(0), op_rows().size()), row_name);

}  // namespace
}  // namespace mt::optest

// Every Ops<T> method on CudaBackend's fp32 and bf16 op tables against the CPU reference in
// double, one test per row of tests/engine/backend/op_rows.h (which states the roles and the
// tolerances: those of tests/engine/backend/ops_table_test.cc, the CPU tables). The rows go
// through the backend as the executor drives it: its device arena, its H2D and D2H streams and
// events around the compute stream, the tables' own scratch. Skips without a device.
#include <gtest/gtest.h>

#include <memory>

#include "engine/backend/cuda/cuda_backend.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/engine/backend/op_rows.h"

namespace mt::optest {
namespace {

class CudaOpsTable : public ::testing::TestWithParam<size_t> {
 protected:
  static void SetUpTestSuite() {
    if (!cuda_available()) return;
    auto b = make_cuda_backend({});
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    backend_ = std::move(b).value();
    memory_ = std::make_unique<BackendDevice>(*backend_);
  }
  // Before the process exits: the backend's streams and memory go while the runtime is up.
  static void TearDownTestSuite() {
    memory_.reset();
    backend_.reset();
  }
  void SetUp() override {
    MT_REQUIRE_CUDA();
    ASSERT_TRUE(backend_ && memory_);
  }
  const Row& row() const { return op_rows()[GetParam()]; }

  static std::unique_ptr<Backend> backend_;
  static std::unique_ptr<BackendDevice> memory_;
};
std::unique_ptr<Backend> CudaOpsTable::backend_;
std::unique_ptr<BackendDevice> CudaOpsTable::memory_;

TEST_P(CudaOpsTable, Fp32) { expect_row_matches(row(), backend_->ops<float>(), *memory_); }
TEST_P(CudaOpsTable, Bf16) { expect_row_matches(row(), backend_->ops<bf16>(), *memory_); }

INSTANTIATE_TEST_SUITE_P(Rows, CudaOpsTable, ::testing::Range(size_t(0), op_rows().size()), row_name);

}  // namespace
}  // namespace mt::optest

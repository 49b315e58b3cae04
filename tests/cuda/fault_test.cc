// Device faults (issue 18 point 6): a launch reports its own error, not one an earlier call or a
// "not ready" query left on the thread; a sticky error (the context unusable) makes
// Backend::error() DEVICE_LOST naming the first failing call. The classification runs without a
// device; the rest skips without one. The sticky fault poisons its whole process, so it runs in
// a death-test child (threadsafe style: a fresh process, its own CUDA context).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/cuda_errors.h"
#include "kernels/cuda/util.cuh"
#include "tests/cuda/cuda_test_util.h"

namespace mt {
namespace {

using cudatest::DeviceBuf;

TEST(CudaFault, StickyErrorsAreClassifiedAsDeviceLost) {
  for (cudaError_t e : {cudaErrorIllegalAddress, cudaErrorLaunchFailure, cudaErrorAssert, cudaErrorMisalignedAddress,
                        cudaErrorIllegalInstruction, cudaErrorHardwareStackError, cudaErrorECCUncorrectable,
                        cudaErrorLaunchTimeout})
    EXPECT_TRUE(cuda::is_sticky(e)) << cudaGetErrorName(e);
  for (cudaError_t e : {cudaSuccess, cudaErrorNotReady, cudaErrorInvalidValue, cudaErrorMemoryAllocation,
                        cudaErrorLaunchOutOfResources, cudaErrorInvalidConfiguration})
    EXPECT_FALSE(cuda::is_sticky(e)) << cudaGetErrorName(e);
  EXPECT_FALSE(cuda::is_sticky(cuda::CudaStatus{"cublasLtMatmul", 13, true})) << "cuBLAS codes are not CUDA codes";
}

TEST(CudaFault, FirstFailureStaysNamedWhenTheDeviceIsLostAfter) {
  CudaErrors a;
  EXPECT_TRUE(a.note(cudaSuccess, "cudaMemcpyAsync(H2D)"));
  EXPECT_TRUE(a.get().ok());
  EXPECT_FALSE(a.note(cudaErrorIllegalAddress, "cudaEventSynchronize"));
  EXPECT_FALSE(a.note(cudaErrorIllegalAddress, "cudaEventRecord"));
  EXPECT_EQ(a.get().code(), StatusCode::kDeviceLost);
  EXPECT_EQ(a.get().message().find("cudaEventSynchronize"), 0u) << a.get().message();
  EXPECT_EQ(a.get().message().find("cudaEventRecord"), std::string::npos) << "only the first is named";

  CudaErrors b;  // a plain failure first (e.g. a refused launch), then the context is lost
  EXPECT_FALSE(b.note(cudaErrorInvalidValue, "attention_forward"));
  EXPECT_EQ(b.get().code(), StatusCode::kInternal);
  EXPECT_FALSE(b.note(cudaErrorLaunchFailure, "cudaEventQuery"));
  EXPECT_EQ(b.get().code(), StatusCode::kDeviceLost);
  EXPECT_EQ(b.get().message().find("attention_forward"), 0u) << b.get().message();
  EXPECT_NE(b.get().message().find("cudaEventQuery"), std::string::npos) << b.get().message();
}

// A failed call leaves its error as the thread's last error; the next launch must not report it.
TEST(CudaFault, LaunchReportsItsOwnErrorNotAnEarlierOne) {
  MT_REQUIRE_CUDA();
  const size_t n = 1000;
  DeviceBuf<float> a(std::vector<float>(n, 1.f)), b(std::vector<float>(n, 2.f));
  void* p = nullptr;
  ASSERT_NE(cudaSuccess, cudaMalloc(&p, size_t(1) << 62));  // out of memory: the last error now
  MT_EXPECT_CUDA_OK(cuda::add_inplace(a.get(), b.get(), n, cudatest::test_stream()));
  EXPECT_EQ(a.download(), std::vector<float>(n, 3.f));
}

// cudaEventQuery answering "not ready" must not fail the next launch on the thread either.
TEST(CudaFault, NotReadyQueryDoesNotFailTheNextLaunch) {
  MT_REQUIRE_CUDA();
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::atomic<bool> release{false};
  ASSERT_EQ(cudaSuccess, cudaLaunchHostFunc(
                             s,
                             [](void* f) {
                               while (!static_cast<std::atomic<bool>*>(f)->load())
                                 std::this_thread::sleep_for(std::chrono::milliseconds(1));
                             },
                             &release));
  cudaEvent_t e = nullptr;
  ASSERT_EQ(cudaSuccess, cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  ASSERT_EQ(cudaSuccess, cudaEventRecord(e, s));
  EXPECT_EQ(cudaErrorNotReady, cudaEventQuery(e));
  const size_t n = 1000;
  DeviceBuf<float> a(std::vector<float>(n, 1.f)), b(std::vector<float>(n, 2.f));
  MT_EXPECT_CUDA_OK(cuda::add_inplace(a.get(), b.get(), n, cudatest::test_stream()));
  release = true;
  EXPECT_EQ(cudaSuccess, cudaStreamSynchronize(s));
  cudaEventDestroy(e);
  cudaStreamDestroy(s);

  // The backend's events: polling a pending one leaves error() clean.
  auto be = make_cuda_backend({});
  ASSERT_TRUE(be.ok());
  ASSERT_TRUE((*be)->reserve_device(size_t(512) << 20).ok());
  auto d = (*be)->device_alloc(size_t(256) << 20);
  ASSERT_TRUE(d.ok());
  (*be)->ops().zero(static_cast<float*>(*d), (size_t(256) << 20) / sizeof(float));
  EventPtr ev = (*be)->record(StreamKind::kCompute);
  while (!ev->done()) (*be)->ops().add_inplace(static_cast<float*>(*d), static_cast<float*>(*d), 16);
  (*be)->host_wait((*be)->record(StreamKind::kCompute));
  EXPECT_TRUE((*be)->error().ok()) << (*be)->error().to_string();
}

// An illegal address in a kernel: error() becomes DEVICE_LOST naming the call that saw it
// first, and host_wait returns rather than hanging.
TEST(CudaFault, StickyFaultIsDeviceLostNamingTheFirstCall) {
  MT_REQUIRE_CUDA();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto b = make_cuda_backend({});
        if (!b.ok()) _exit(2);
        Backend& be = **b;
        if (!be.reserve_device(1 << 20).ok()) _exit(3);
        auto d = be.device_alloc(4096);
        if (!d.ok()) _exit(4);
        be.ops().add_inplace(reinterpret_cast<float*>(uintptr_t(1) << 47), static_cast<const float*>(*d), 1024);
        be.host_wait(be.record(StreamKind::kCompute));
        const Status e = be.error();
        std::fprintf(stderr, "%s\n", e.to_string().c_str());
        _exit(e.code() == StatusCode::kDeviceLost ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "DEVICE_LOST.*cudaErrorIllegalAddress");
}

}  // namespace
}  // namespace mt

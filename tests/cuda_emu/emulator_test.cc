// The emulator itself (cuda_emu.h): it computes what CUDA computes, it shows a missing barrier,
// and it stops on what CUDA leaves undefined. Kernels here are launched through mt_emu::launch
// directly (what host_compile.py turns <<<...>>> into).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace {

using mt_emu::Config;

// Launched on the default stream and waited for.
void launch(dim3 grid, dim3 block, size_t smem, const std::function<void()>& body) {
  mt_emu::launch(Config(grid, block, smem), nullptr, "test_kernel", body);
  cudaDeviceSynchronize();
}

TEST(CudaEmulator, WarpShufflesAndBlockBarriersComputeWhatCudaComputes) {
  std::vector<float> out(4, -1.f);
  launch(dim3(2), dim3(64), 2 * sizeof(float), [&] {
    auto* s = static_cast<float*>(mt_emu::dynamic_shared());
    float v = float(threadIdx.x + 1);  // a warp's sum by butterfly, then the block's through shared memory
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) s[threadIdx.x / 32] = v;
    __syncthreads();
    const unsigned votes = __ballot_sync(0xffffffffu, threadIdx.x % 2 == 0);  // every lane votes
    if (threadIdx.x == 0) out[blockIdx.x * 2] = s[0] + s[1];
    if (threadIdx.x == 1) out[blockIdx.x * 2 + 1] = float(__popc(votes));
  });
  EXPECT_EQ(out, (std::vector<float>{2080, 16, 2080, 16}));  // 1 + ... + 64; the 16 even lanes
}

// Thread t writes s[t] and reads s[t + 1]: with the barrier between them it reads t + 1; without
// it, some thread reads its neighbour's slot before it is written (NaN, as shared memory starts).
std::vector<float> neighbours(bool barrier) {
  std::vector<float> out(2 * 64);
  launch(dim3(2), dim3(64), 65 * sizeof(float), [&] {
    auto* s = static_cast<float*>(mt_emu::dynamic_shared());
    s[threadIdx.x] = float(threadIdx.x + 1);
    if (threadIdx.x == 0) s[64] = 65.f;
    if (barrier) __syncthreads();
    out[blockIdx.x * 64 + threadIdx.x] = s[threadIdx.x + 1];
  });
  return out;
}

TEST(CudaEmulator, AMissingBarrierShowsInTheResult) {
  for (float v : neighbours(true)) EXPECT_FALSE(std::isnan(v));
  int unwritten = 0;
  for (float v : neighbours(false)) unwritten += std::isnan(v);
  EXPECT_GT(unwritten, 0) << "every thread saw its neighbour's write without a barrier";
}

TEST(CudaEmulator, ALaunchBeyondTheSharedMemoryLimitFailsWithoutRunning) {
  (void)cudaGetLastError();
  bool ran = false;
  launch(dim3(1), dim3(32), 64 * 1024, [&] { ran = true; });  // > 48 KiB, no attribute set
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  launch(dim3(1), dim3(2048), 0, [&] { ran = true; });  // > 1024 threads
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_FALSE(ran);
}

TEST(CudaEmulator, ACopyWhosePointersAreNotWhereItsKindSaysIsRefused) {
  std::vector<float> host(8, 1.f), pageable(8, 0.f);
  float* dev = nullptr;
  ASSERT_EQ(cudaSuccess, cudaMalloc(reinterpret_cast<void**>(&dev), 8 * sizeof(float)));
  EXPECT_EQ(cudaSuccess, cudaMemcpy(dev, host.data(), 8 * sizeof(float), cudaMemcpyHostToDevice));
  EXPECT_EQ(cudaErrorInvalidValue, cudaMemcpy(pageable.data(), host.data(), 32, cudaMemcpyHostToDevice));
  EXPECT_EQ(cudaErrorInvalidValue, cudaMemcpy(host.data(), dev, 32, cudaMemcpyDeviceToDevice));
  EXPECT_EQ(cudaErrorInvalidValue, cudaMemcpy(dev, host.data(), 9 * sizeof(float), cudaMemcpyHostToDevice))
      << "past the allocation";
  EXPECT_EQ(cudaErrorInvalidValue, cudaMemset(pageable.data(), 0, 32));
  float* pinned = nullptr;  // mapped host memory is reachable from the device
  ASSERT_EQ(cudaSuccess, cudaHostAlloc(reinterpret_cast<void**>(&pinned), 32, 0));
  EXPECT_EQ(cudaSuccess, cudaMemcpy(pinned, dev, 32, cudaMemcpyDeviceToDevice));
  EXPECT_EQ(pinned[7], 1.f);
  (void)cudaGetLastError();
  cudaFreeHost(pinned);
  cudaFree(dev);
}

TEST(CudaEmulatorDeathTest, WhatCudaLeavesUndefinedStopsTheProcessNamingIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(launch(dim3(1), dim3(32), 0,
                      [] {
                        if (threadIdx.x >= 16) return;
                        (void)__shfl_xor_sync(0xffffffffu, 1.f, 1);
                      }),
               "exited");
  EXPECT_DEATH(launch(dim3(1), dim3(32), 0,
                      [] {
                        if (threadIdx.x < 16) __syncwarp();
                        else (void)__shfl_sync(0xffffffffu, 1, 0);
                      }),
               "different warp collectives");
  EXPECT_DEATH(launch(dim3(1), dim3(32), 0,
                      [] {
                        if (threadIdx.x < 16) __syncwarp();  // waits for lanes that wait below
                        else __syncthreads();
                      }),
               "deadlock");
  EXPECT_DEATH(launch(dim3(1), dim3(32), 0, [] { (void)__shfl_sync(0x0000ffffu, 1, 20); }),
               "outside its mask|not in its mask");
  EXPECT_DEATH(launch(dim3(1), dim3(64), 0, [] { mt_emu::check_launch_bounds(32); }), "__launch_bounds__");
  float host = 0.f;  // a kernel handed a pageable host address
  EXPECT_DEATH(mt_emu::launch_kernel(Config(dim3(1), dim3(1)), nullptr, "k", std::make_tuple(1, &host),
                                     [](int, float* p) { *p = 1.f; }),
               "kernel k, argument 1: .* is neither device memory nor mapped host memory");
}

}  // namespace

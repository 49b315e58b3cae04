// The pinned allocator's capacity check (issue 18 point 8) needs no device: a store larger than
// the host's available memory is refused before anything is pinned, naming the sizes and the
// locked-memory limit; a small one passes. Pinning itself (and its speed) needs a device:
// megatrain-bench pin in scripts/gpu_check.sh. Placed memory (a NUMA placement: mapped, bound,
// then registered) is pinned and copies to and from the device like cudaHostAlloc's.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/backend/cuda/pinned_allocator.h"
#include "engine/base/numa.h"
#include "tests/cuda/cuda_test_util.h"

namespace mt {
namespace {

TEST(CudaPinned, CapacityCheckRefusesMoreThanAvailableNamingSizesAndLimit) {
  PinnedAllocator a(0);
  EXPECT_TRUE(a.pinned());
  EXPECT_TRUE(a.parallel_allocate());
  EXPECT_TRUE(a.check_capacity(size_t(1) << 20).ok());
  const Status s = a.check_capacity(size_t(1) << 60);  // 1 EiB
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  for (const char* part : {"GiB", "MemAvailable", "ulimit -l", "memory.layout = compact"})
    EXPECT_NE(s.message().find(part), std::string::npos) << part << " missing from: " << s.message();
  EXPECT_EQ(a.pinned_bytes(), 0u) << "a refused check pins nothing";
}

TEST(CudaPinned, PlacedMemoryIsBoundThenPinnedAndCopies) {
  MT_REQUIRE_CUDA();
  PinnedAllocator a(0);
  const size_t bytes = (size_t(5) << 20) + 12345;  // not a whole number of huge pages
  const int node = NumaNodes::read().ids.back();  // another node than the test's, on two
  int calls = 0;
  Status placed;
  auto p = a.allocate_placed(bytes, [&](void* q, size_t n) {
    ++calls;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % (size_t(2) << 20), 0u) << "2 MiB aligned";
    EXPECT_GE(n, bytes);
    return prefer_node(q, n, node);
  }, &placed);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(placed.ok() || placed.message().find("mbind") != std::string::npos) << placed.message();
  EXPECT_GE(a.pinned_bytes(), bytes);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, *p), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost) << "registered (page-locked) host memory";
  if (placed.ok()) {  // bound (the policy), and registering faulted the pages in there
    EXPECT_EQ(preferred_node(*p), node);
    EXPECT_EQ(node_of_page(*p), node);
  }
  // A round trip through the device, asynchronously (only pinned memory copies without staging).
  unsigned char* h = static_cast<unsigned char*>(*p);
  for (size_t i = 0; i < bytes; ++i) h[i] = static_cast<unsigned char>(i * 7 + 3);
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, bytes), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, s), cudaSuccess);
  std::vector<unsigned char> want(h, h + bytes);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  std::memset(h, 0, bytes);
  ASSERT_EQ(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(std::memcmp(h, want.data(), bytes), 0);
  cudaStreamDestroy(s);
  cudaFree(d);
  a.release(*p, bytes);
  EXPECT_EQ(a.pinned_bytes(), 0u) << "released: unregistered and unmapped";
}

}  // namespace
}  // namespace mt

// The pinned allocator's capacity check (issue 18 point 8) needs no device: a store larger than
// the host's available memory is refused before anything is pinned, naming the sizes and the
// locked-memory limit; a small one passes. Pinning itself (and its speed) needs a device:
// megatrain-bench pin in scripts/gpu_check.sh.
#include <gtest/gtest.h>

#include <cstdint>

#include "engine/backend/cuda/pinned_allocator.h"

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

}  // namespace
}  // namespace mt

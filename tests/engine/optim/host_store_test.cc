// HostStore allocation (issue 18 point 8): the allocator's capacity check refuses a store before
// anything is pinned, and a store allocated from several threads (an allocator that allows it)
// lays its units out exactly as one allocated from one. And the update order it keeps.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>

#include "engine/optim/host_store.h"

namespace mt {
namespace {

class FakeAllocator final : public HostAllocator {
 public:
  explicit FakeAllocator(bool parallel, size_t capacity = SIZE_MAX) : parallel_(parallel), capacity_(capacity) {}
  Result<void*> allocate(size_t bytes) override {
    ++calls;
    return std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  }
  void release(void* p, size_t) override { std::free(p); }
  Status check_capacity(size_t total) const override {
    asked = total;
    return total <= capacity_ ? Status::Ok() : resource_exhausted("pinning " + std::to_string(total) + " bytes: no");
  }
  bool parallel_allocate() const override { return parallel_; }
  std::atomic<int> calls{0};
  mutable size_t asked = 0;

 private:
  bool parallel_;
  size_t capacity_;
};

std::vector<ParamSchema> units(int n, size_t numel) {
  std::vector<ParamSchema> u(static_cast<size_t>(n));
  for (auto& p : u) p.numel = numel;
  return u;
}

TEST(HostStorePinning, CapacityCheckRefusesBeforeAnyAllocation) {
  FakeAllocator a(true, 1000);
  auto s = HostStore::create(units(3, 1000), MemoryLayout::kExact, false, a);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(a.calls.load(), 0) << "nothing may be pinned before the check";
  EXPECT_GT(a.asked, 3u * 1000 * 16) << "the check sees the whole store";
}

TEST(HostStorePinning, ParallelAllocationKeepsTheLayout) {
  FakeAllocator one(false), many(true);
  const auto u = units(5, 12345);
  auto a = HostStore::create(u, MemoryLayout::kCompact, true, one);
  auto b = HostStore::create(u, MemoryLayout::kCompact, true, many);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->total_bytes(), (*b)->total_bytes());
  EXPECT_EQ(one.asked, (*a)->total_bytes());
  EXPECT_EQ((*a)->total_params(), (*b)->total_params());
}

// The update order (what the NVMe tier reads ahead in and a checkpoint writes in) is 0..U-1
// until told, and an order that does not name every unit exactly once is not taken.
TEST(HostStoreOrder, TakesOnlyAnOrderOfEveryUnitOnce) {
  auto s = HostStore::create(units(4, 100), MemoryLayout::kExact, false, default_host_allocator());
  ASSERT_TRUE(s.ok());
  HostStore& store = **s;
  EXPECT_EQ(store.update_order(), (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_TRUE(store.set_update_order({3, 2, 1, 0}));
  EXPECT_EQ(store.update_order(), (std::vector<size_t>{3, 2, 1, 0}));
  for (const std::vector<size_t>& bad : std::vector<std::vector<size_t>>{{0, 1, 2}, {0, 1, 2, 2}, {0, 1, 2, 4}, {}}) {
    EXPECT_FALSE(store.set_update_order(bad));
    EXPECT_EQ(store.update_order(), (std::vector<size_t>{3, 2, 1, 0})) << "a refused order changes nothing";
  }
}

}  // namespace
}  // namespace mt

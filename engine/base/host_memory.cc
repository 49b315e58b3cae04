#include "engine/base/host_memory.h"

#include <cstdlib>
#include <string>

namespace mt {

namespace {

constexpr size_t kAlign = 4096;

class AlignedAllocator final : public HostAllocator {
 public:
  Result<void*> allocate(size_t bytes) override {
    void* p = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
    if (!p) return resource_exhausted("host allocation of " + std::to_string(bytes) + " bytes failed");
    return p;
  }
  void release(void* p, size_t) override { std::free(p); }
};

}  // namespace

HostAllocator& default_host_allocator() {
  static AlignedAllocator a;
  return a;
}

Result<HostBuffer> HostBuffer::allocate(HostAllocator& alloc, size_t bytes) {
  HostBuffer b;
  if (bytes == 0) return b;
  MT_ASSIGN_OR_RETURN(b.p_, alloc.allocate(bytes));
  b.alloc_ = &alloc;
  b.bytes_ = bytes;
  return b;
}

HostBuffer& HostBuffer::operator=(HostBuffer&& o) noexcept {
  if (this != &o) {
    if (p_) alloc_->release(p_, bytes_);
    alloc_ = o.alloc_, p_ = o.p_, bytes_ = o.bytes_;
    o.alloc_ = nullptr, o.p_ = nullptr, o.bytes_ = 0;
  }
  return *this;
}

HostBuffer::~HostBuffer() {
  if (p_) alloc_->release(p_, bytes_);
}

}  // namespace mt

#include "engine/optim/host_store.h"

#include <cstdlib>
#include <cstring>

namespace mt {

namespace {

constexpr size_t kAlign = 4096;
constexpr size_t kChunkBytes = size_t(1) << 30;  // units are packed into chunks of ~1 GiB

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

}  // namespace

Result<MemoryLayout> parse_memory_layout(const std::string& name) {
  if (name == "exact") return MemoryLayout::kExact;
  if (name == "compact") return MemoryLayout::kCompact;
  return invalid_argument("memory.layout = '" + name + "' is not one of exact, compact");
}

const char* memory_layout_name(MemoryLayout l) { return l == MemoryLayout::kExact ? "exact" : "compact"; }

size_t state_elem_bytes(MemoryLayout layout) { return layout == MemoryLayout::kExact ? 4 : 2; }

size_t host_bytes_per_param(MemoryLayout layout, bool shadow) {
  return 4 + 3 * state_elem_bytes(layout) + (shadow ? 2 : 0);
}

namespace {
HostStoreBytes unit_store_bytes(size_t numel, MemoryLayout layout, bool shadow) {
  const size_t st = state_elem_bytes(layout), state = round_up(numel * st, kAlign);
  return {round_up(numel * 4, kAlign), state, state, state, shadow ? round_up(numel * 2, kAlign) : 0};
}
}  // namespace

HostStoreBytes host_store_bytes(const std::vector<ParamSchema>& units, MemoryLayout layout, bool shadow) {
  HostStoreBytes b;
  for (const auto& u : units) {
    const HostStoreBytes ub = unit_store_bytes(u.numel, layout, shadow);
    b.master += ub.master, b.grad += ub.grad, b.m += ub.m, b.v += ub.v, b.shadow += ub.shadow;
  }
  return b;
}

Result<std::unique_ptr<HostStore>> HostStore::create(const std::vector<ParamSchema>& units, MemoryLayout layout,
                                                     bool shadow, HostAllocator& alloc) {
  std::unique_ptr<HostStore> s(new HostStore(layout, alloc));
  const size_t st = state_elem_bytes(layout);
  // Per unit: master, grad, m, v, shadow regions, each 4 KiB aligned. Units fill a chunk until
  // it would exceed kChunkBytes; a unit larger than that gets a chunk of its own.
  std::vector<size_t> unit_bytes;
  for (const auto& u : units) unit_bytes.push_back(unit_store_bytes(u.numel, layout, shadow).total());
  size_t i = 0;
  while (i < units.size()) {
    size_t j = i, bytes = 0;
    while (j < units.size() && (j == i || bytes + unit_bytes[j] <= kChunkBytes)) bytes += unit_bytes[j++];
    MT_ASSIGN_OR_RETURN(void* chunk, alloc.allocate(bytes));
    std::memset(chunk, 0, bytes);
    s->chunks_.emplace_back(chunk, bytes);
    s->total_bytes_ += bytes;
    char* p = static_cast<char*>(chunk);
    for (; i < j; ++i) {
      const size_t n = units[i].numel;
      HostUnit hu;
      hu.numel = n;
      hu.master = reinterpret_cast<float*>(p), p += round_up(n * 4, kAlign);
      hu.grad = p, p += round_up(n * st, kAlign);
      hu.m = p, p += round_up(n * st, kAlign);
      hu.v = p, p += round_up(n * st, kAlign);
      if (shadow) hu.shadow = reinterpret_cast<bf16*>(p), p += round_up(n * 2, kAlign);
      s->units_.push_back(hu);
    }
  }
  return s;
}

HostStore::~HostStore() {
  for (auto& [p, b] : chunks_) alloc_.release(p, b);
}

size_t HostStore::total_params() const {
  size_t n = 0;
  for (const auto& u : units_) n += u.numel;
  return n;
}

void HostStore::zero_optimizer_state() {
  const size_t st = state_elem_bytes(layout_);
  for (auto& u : units_) {
    std::memset(u.m, 0, u.numel * st);
    std::memset(u.v, 0, u.numel * st);
  }
}

void HostStore::zero_grads() {
  const size_t st = state_elem_bytes(layout_);
  for (auto& u : units_) std::memset(u.grad, 0, u.numel * st);
}

}  // namespace mt

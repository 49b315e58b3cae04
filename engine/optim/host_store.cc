#include "engine/optim/host_store.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

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

bool nvme_tiered(const ParamSchema& unit) { return unit.kind == UnitKind::kDecoder || unit.kind == UnitKind::kExpert; }

std::vector<size_t> nvme_unit_numel(const std::vector<ParamSchema>& units) {
  std::vector<size_t> n;
  for (const ParamSchema& u : units) n.push_back(nvme_tiered(u) ? u.numel : 0);
  return n;
}

namespace {
// tiered: the unit's moments (and, with masters, its masters) are on the NVMe tier.
// windowed: the unit's gradient is in the grad window's buffers, not its own.
HostStoreBytes unit_store_bytes(size_t numel, MemoryLayout layout, bool shadow, bool moments, bool tiered = false,
                                bool tier_masters = false, bool windowed = false) {
  const size_t st = state_elem_bytes(layout), state = round_up(numel * st, kAlign), mv = moments && !tiered ? state : 0;
  const size_t master = tiered && tier_masters ? 0 : round_up(numel * 4, kAlign);
  const uint64_t nvme = tiered ? 2 * direct_round_up(numel * st) + (tier_masters ? direct_round_up(numel * 4) : 0) : 0;
  return {master, windowed ? 0 : state, mv, mv, shadow ? round_up(numel * 2, kAlign) : 0, nvme};
}

bool holds_moments(const MomentUnits& moments, size_t unit) { return moments.empty() || moments[unit]; }

// NUMA runs are cut on 2 MiB boundaries (the nearest to each block's edge): a huge page is never
// split between nodes, and an edge moves by at most 1 MiB of a block of hundreds.
constexpr size_t kNumaGrain = size_t(2) << 20;

// A unit's regions with their element sizes (st: a gradient's or moment's), absent ones null.
constexpr size_t kUnitRegions = 5;
std::array<std::pair<const void*, size_t>, kUnitRegions> unit_regions(const HostUnit& hu, size_t st) {
  return {{{hu.master, 4}, {hu.grad, st}, {hu.m, st}, {hu.v, st}, {hu.shadow, 2}}};
}

// Appends the runs of unit u's regions (hu, at offsets from `base`): each worker's update block
// (update_blocks) on the worker's node, neighbouring runs of one node merged.
void add_numa_runs(const ParamSchema& u, const HostUnit& hu, size_t st, const NumaPlacement& numa, const void* base,
                   std::vector<NumaRun>& runs) {
  const auto blocks = update_blocks(u, int(numa.worker_node.size()));
  auto nearest = [](size_t b) { return (b + kNumaGrain / 2) / kNumaGrain * kNumaGrain; };
  for (const auto& [ptr, eb] : unit_regions(hu, st)) {
    if (!ptr) continue;
    const size_t off = size_t(static_cast<const char*>(ptr) - static_cast<const char*>(base));
    for (size_t w = 0; w < blocks.size(); ++w) {
      size_t b = nearest(off + blocks[w].first * eb), e = nearest(off + blocks[w].second * eb);
      const int node = numa.worker_node[w];
      if (!runs.empty() && runs.back().chunk == base) b = std::max(b, runs.back().end);
      if (e <= b) continue;
      if (!runs.empty() && runs.back().chunk == base && runs.back().node == node && runs.back().end == b) runs.back().end = e;
      else runs.push_back({base, b, e, node});
    }
  }
}

// Each run bound to a node is a memory map of its own (a VMA), and a process has
// vm.max_map_count of them (65,530 by default) for everything. A unit's five regions take at most
// one run a node each; a store that could take more than half the limit (a mixture of thousands
// of experts) is left unplaced, with the reason.
Status check_numa_run_budget(const std::vector<ParamSchema>& units, const NumaPlacement& numa) {
  long limit = 65530;
  if (FILE* f = std::fopen("/proc/sys/vm/max_map_count", "r")) {
    if (std::fscanf(f, "%ld", &limit) != 1) limit = 65530;
    std::fclose(f);
  }
  const size_t runs = units.size() * kUnitRegions * numa.nodes.ids.size();
  if (runs <= size_t(limit / 2)) return Status::Ok();
  return resource_exhausted(std::to_string(units.size()) + " units over " + std::to_string(numa.nodes.ids.size()) +
                            " nodes could take " + std::to_string(runs) + " memory maps, more than half of "
                            "vm.max_map_count = " + std::to_string(limit) + "; raise it to at least " +
                            std::to_string(2 * runs) + " to place the store");
}

// The grad window's buffers: grad_window of them, each the largest tiered unit's gradient (0: none).
size_t grad_window_bytes(const std::vector<ParamSchema>& units, MemoryLayout layout, const NvmeTierOptions* tier,
                         size_t* each = nullptr) {
  size_t largest = 0;
  for (const ParamSchema& u : units)
    if (nvme_tiered(u)) largest = std::max(largest, round_up(u.numel * state_elem_bytes(layout), kAlign));
  if (each) *each = largest;
  return tier && tier->grad_window > 0 ? size_t(tier->grad_window) * largest : 0;
}
}  // namespace

HostStoreBytes host_store_bytes(const std::vector<ParamSchema>& units, MemoryLayout layout, bool shadow,
                                const MomentUnits& moments, const NvmeTierOptions* tier) {
  HostStoreBytes b;
  const bool windowed = tier && tier->grad_window > 0;
  for (size_t i = 0; i < units.size(); ++i) {
    const bool tiered = tier && nvme_tiered(units[i]);
    const HostStoreBytes ub =
        unit_store_bytes(units[i].numel, layout, shadow, holds_moments(moments, i), tiered, tier && tier->masters, tiered && windowed);
    b.master += ub.master, b.grad += ub.grad, b.m += ub.m, b.v += ub.v, b.shadow += ub.shadow, b.nvme += ub.nvme;
  }
  b.grad += grad_window_bytes(units, layout, tier);
  return b;
}

Result<std::unique_ptr<HostStore>> HostStore::create(const std::vector<ParamSchema>& units, MemoryLayout layout,
                                                     bool shadow, HostAllocator& alloc, const MomentUnits& moments,
                                                     const NvmeTierOptions* tier, const NumaPlacement* numa) {
  if (!moments.empty() && moments.size() != units.size())
    return invalid_argument("HostStore: a moments mask of " + std::to_string(moments.size()) + " units for " +
                            std::to_string(units.size()));
  if (tier && !moments.empty()) return invalid_argument("the NVMe tier does not hold a sharded optimizer's state");
  std::unique_ptr<HostStore> s(new HostStore(layout, alloc));
  const size_t st = state_elem_bytes(layout);
  auto tiered = [&](size_t i) { return tier && nvme_tiered(units[i]); };
  const bool windowed = tier && tier->grad_window > 0;
  if (tier) {  // the drives' files first: a full drive or a tmpfs path is refused before any pinning
    MT_ASSIGN_OR_RETURN(s->tier_, NvmeTier::create(*tier, nvme_unit_numel(units), st));
  }
  // Per unit: master, grad, m, v, shadow regions, each 4 KiB aligned. Units fill a chunk until
  // it would exceed kChunkBytes; a unit larger than that gets a chunk of its own.
  std::vector<size_t> unit_bytes;
  for (size_t i = 0; i < units.size(); ++i)
    unit_bytes.push_back(
        unit_store_bytes(units[i].numel, layout, shadow, holds_moments(moments, i), tiered(i), tier && tier->masters,
                         tiered(i) && windowed)
            .total());
  struct Plan {
    size_t first, end, bytes;
  };
  std::vector<Plan> plan;
  size_t total = 0;
  for (size_t i = 0; i < units.size();) {
    size_t j = i, bytes = 0;
    while (j < units.size() && (j == i || bytes + unit_bytes[j] <= kChunkBytes)) bytes += unit_bytes[j++];
    plan.push_back({i, j, bytes});
    total += bytes;
    i = j;
  }
  size_t window_each = 0;
  const size_t window_bytes = grad_window_bytes(units, layout, tier, &window_each);
  if (window_bytes > 0) plan.push_back({units.size(), units.size(), window_bytes}), total += window_bytes;
  // Refused up front, before minutes of pinning (pinned memory must fit in physical memory).
  MT_RETURN_IF_ERROR(alloc.check_capacity(total));
  // Unit i's regions at p (p moves past them): master, grad, m, v, shadow, each 4 KiB aligned.
  auto carve = [&](size_t i, char*& p) {
    const size_t n = units[i].numel;
    HostUnit hu;
    hu.numel = n;
    hu.tiered = tiered(i);
    if (!hu.tiered || !tier->masters) hu.master = reinterpret_cast<float*>(p), p += round_up(n * 4, kAlign);
    if (!(hu.tiered && windowed)) hu.grad = p, p += round_up(n * st, kAlign);
    if (holds_moments(moments, i) && !hu.tiered) {
      hu.m = p, p += round_up(n * st, kAlign);
      hu.v = p, p += round_up(n * st, kAlign);
    }
    if (shadow) hu.shadow = reinterpret_cast<bf16*>(p), p += round_up(n * 2, kAlign);
    return hu;
  };
  // With an active NUMA placement, each chunk's runs are bound to their nodes before any page of
  // it is touched (zeroed or pinned) — unless they would take too many of the kernel's memory maps.
  Status numa_status;
  const bool place = numa && numa->active() && (numa_status = check_numa_run_budget(units, *numa)).ok();
  std::vector<std::vector<NumaRun>> runs(plan.size());
  std::vector<Status> placed(plan.size());
  auto bind_chunk = [&](size_t k, void* base, size_t bytes) {
    char* p = static_cast<char*>(base);
    for (size_t i = plan[k].first; i < plan[k].end; ++i) {
      const HostUnit hu = carve(i, p);
      add_numa_runs(units[i], hu, st, *numa, base, runs[k]);
    }
    for (NumaRun& r : runs[k]) r.end = std::min(r.end, round_up(bytes, kAlign));
    std::erase_if(runs[k], [](const NumaRun& r) { return r.end <= r.begin; });
    for (const NumaRun& r : runs[k])
      MT_RETURN_IF_ERROR(prefer_node(static_cast<char*>(base) + r.begin, r.end - r.begin, r.node));
    return Status::Ok();
  };
  // Allocate and zero the chunks. Pinning is page-by-page work in the driver (fault in, zero,
  // lock) at a few GB/s per thread, so 1.5 TB from one thread would take minutes; an allocator
  // that allows it gets the chunks from several threads at once (megatrain-bench pin measures
  // both). The chunks keep their planned order whatever thread pinned them.
  std::vector<void*> chunks(plan.size(), nullptr);
  Status first_error;
  std::mutex error_mu;
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t k; (k = next++) < plan.size();) {
      {
        std::lock_guard<std::mutex> l(error_mu);
        if (!first_error.ok()) return;
      }
      // Chunks under 2 MiB (tiny stores) stay unplaced: their memory may be the heap's, touched.
      auto c = place && k < plan.size() - (window_bytes > 0) && plan[k].bytes >= kNumaGrain
                   ? alloc.allocate_placed(plan[k].bytes, [&](void* p, size_t b) { return bind_chunk(k, p, b); }, &placed[k])
                   : alloc.allocate(plan[k].bytes);
      if (!c.ok()) {
        std::lock_guard<std::mutex> l(error_mu);
        if (first_error.ok()) first_error = c.status();
        return;
      }
      std::memset(*c, 0, plan[k].bytes);
      chunks[k] = *c;
    }
  };
  const size_t nthreads = alloc.parallel_allocate()
                              ? std::min<size_t>(plan.size(), std::clamp<size_t>(std::thread::hardware_concurrency() / 2,
                                                                                 std::min(2u, std::thread::hardware_concurrency()), 8))
                              : 1;
  if (nthreads <= 1) {
    worker();
  } else {
    std::vector<std::thread> ts;
    for (size_t t = 0; t < nthreads; ++t) ts.emplace_back(worker);
    for (auto& t : ts) t.join();
  }
  for (size_t k = 0; k < plan.size(); ++k)
    if (chunks[k]) s->chunks_.emplace_back(chunks[k], plan[k].bytes);  // released by ~HostStore on failure
  MT_RETURN_IF_ERROR(first_error);
  s->numa_status_ = numa_status;
  for (size_t k = 0; k < plan.size(); ++k) {
    if (!placed[k].ok() && s->numa_status_.ok()) s->numa_status_ = placed[k];
    s->numa_runs_.insert(s->numa_runs_.end(), runs[k].begin(), runs[k].end());
  }
  if (!s->numa_status_.ok())
    std::fprintf(stderr, "megatrain: warning: the host store is not placed on NUMA nodes (%s); the optimizer reads "
                 "across sockets\n", s->numa_status_.message().c_str());
  for (size_t k = 0; k < plan.size(); ++k) {
    s->total_bytes_ += plan[k].bytes;
    char* p = static_cast<char*>(chunks[k]);
    for (size_t i = plan[k].first; i < plan[k].end; ++i) s->units_.push_back(carve(i, p));
  }
  if (window_bytes > 0)
    s->window_ = std::make_unique<GradWindow>(static_cast<char*>(chunks.back()), size_t(tier->grad_window), window_each,
                                              units.size());
  for (const ParamSchema& u : units) {
    s->expert_.push_back(u.kind == UnitKind::kExpert);
    s->names_.push_back(u.kind == UnitKind::kExpert ? "expert " + std::to_string(u.expert) + " of layer " + std::to_string(u.layer)
                        : u.kind == UnitKind::kDecoder ? "decoder " + std::to_string(u.layer)
                                                       : unit_kind_name(u.kind));
  }
  s->updates_.assign(units.size(), 0);
  s->update_order_.resize(units.size());
  for (size_t u = 0; u < units.size(); ++u) s->update_order_[u] = u;
  return s;
}

std::vector<long> HostStore::expert_updates() const {
  std::vector<long> out;
  for (size_t u = 0; u < units_.size(); ++u)
    if (expert_[u]) out.push_back(updates_[u]);
  return out;
}

Status HostStore::set_expert_updates(const std::vector<long>& counts) {
  size_t i = 0;
  for (size_t u = 0; u < units_.size(); ++u)
    if (expert_[u]) {
      if (i >= counts.size() || counts[i] < 0) break;
      updates_[u] = counts[i++];
    }
  if (i != counts.size() || i != size_t(std::count(expert_.begin(), expert_.end(), 1)))
    return invalid_argument("expert update counts: " + std::to_string(counts.size()) + " given (each >= 0) for " +
                            std::to_string(std::count(expert_.begin(), expert_.end(), 1)) + " experts");
  return Status::Ok();
}

HostStore::~HostStore() {
  for (auto& [p, b] : chunks_) alloc_.release(p, b);
}

size_t HostStore::total_params() const {
  size_t n = 0;
  for (const auto& u : units_) n += u.numel;
  return n;
}

namespace {
// memset in 4 MiB pieces on the pool's threads (one thread: a 7 B model's moments are 30-60 GB).
void zero_bytes(ThreadPool* pool, void* p, size_t bytes) {
  if (!pool) return (void)std::memset(p, 0, bytes);
  pool->parallel_ranges(bytes, size_t(4) << 20, [&](size_t o, size_t k) { std::memset(static_cast<char*>(p) + o, 0, k); });
}
}  // namespace

void round_to_bf16_on(ThreadPool& pool, bf16* dst, const float* src, size_t n) {
  pool.parallel_ranges(n, size_t(1) << 16, [&](size_t lo, size_t k) { round_to_bf16(dst + lo, src + lo, k); });
}

void HostStore::zero_optimizer_state(bool masters_follow, ThreadPool* pool) {
  const size_t st = state_elem_bytes(layout_);
  for (auto& u : units_) {
    if (!u.m) continue;
    zero_bytes(pool, u.m, u.numel * st);
    zero_bytes(pool, u.v, u.numel * st);
  }
  if (tier_) {  // the tier's moments read as zeros; its masters (if it holds them) are kept
    if (tier_->masters() && !masters_follow) {
      for (size_t i = 0; i < units_.size(); ++i)
        if (units_[i].tiered) (void)tier_zero_moments(i);
    } else {
      tier_->zero_all();
    }
  }
  std::fill(updates_.begin(), updates_.end(), 0);
}

Status HostStore::tier_zero_moments(size_t i) {
  MT_ASSIGN_OR_RETURN(NvmeTier::Slot s, tier_->acquire(i));
  const size_t bytes = units_[i].numel * state_elem_bytes(layout_);
  std::memset(s.m, 0, bytes);
  std::memset(s.v, 0, bytes);
  tier_->release(i, true);
  return Status::Ok();
}

void HostStore::refresh_shadows() const {
  if (units_.empty() || !units_[0].shadow) return;  // every unit has a shadow, or none does
  ThreadPool pool(0);
  for (size_t i = 0; i < units_.size(); ++i) {
    const HostUnit& u = units_[i];
    if (!u.shadow) continue;
    if (u.master) {
      round_to_bf16_on(pool, u.shadow, u.master, u.numel);
      continue;
    }
    auto master = const_cast<HostStore*>(this)->acquire_master(i);  // on the tier
    if (!master.ok()) continue;  // the tier's sticky error fails the job's next step
    round_to_bf16(u.shadow, *master, u.numel);
    const_cast<HostStore*>(this)->release(i, false);
  }
}

template <typename S>
Result<UnitState<S>> HostStore::acquire(size_t i) {
  UnitState<S> st = state<S>(i);
  if (!units_[i].tiered) return st;
  auto slot = tier_->acquire(i);
  if (!slot.ok()) return slot.status().with_context(names_[i]);
  st.m = static_cast<S*>(slot->m);
  st.v = static_cast<S*>(slot->v);
  if (slot->master) st.master = slot->master;
  return st;
}

Result<float*> HostStore::acquire_master(size_t i) {
  if (!units_[i].tiered || units_[i].master) return units_[i].master;
  auto slot = tier_->acquire(i);
  if (!slot.ok()) return slot.status().with_context(names_[i]);
  return slot->master;
}

void HostStore::release(size_t i, bool dirty) {
  if (units_[i].tiered) tier_->release(i, dirty);
}

bool HostStore::set_update_order(const std::vector<size_t>& order) {
  std::vector<char> seen(units_.size(), 0);
  bool whole = order.size() == seen.size();
  for (size_t u : order) whole = whole && u < seen.size() && !seen[u]++;
  if (!whole) return false;
  update_order_ = order;
  if (!tier_) return true;
  std::vector<size_t> tiered;
  for (size_t u : order)
    if (units_[u].tiered) tiered.push_back(u);
  tier_->set_order(std::move(tiered));
  return true;
}

template Result<UnitState<float>> HostStore::acquire<float>(size_t);
template Result<UnitState<bf16>> HostStore::acquire<bf16>(size_t);

void HostStore::zero_grads(ThreadPool* pool) {
  const size_t st = state_elem_bytes(layout_);
  for (auto& u : units_)
    if (u.grad) zero_bytes(pool, u.grad, u.numel * st);  // a window's buffers are written whole as gradients land
}

}  // namespace mt

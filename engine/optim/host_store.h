// HostStore: everything that lives in host memory per streamed unit — fp32 master weights,
// Adam m and v, the gradient buffer and the optional bf16 compute shadow — in the `exact`
// (fp32 moments and grads: 16 B/param) or `compact` (bf16 moments and grads: 10 B/param)
// layout. Memory comes from a HostAllocator in large aligned chunks; a backend that can pin
// (CUDA) supplies a pinning allocator, so every byte is DMA-able.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "engine/optim/grad_window.h"
#include "engine/optim/nvme_tier.h"
#include "engine/optim/optimizer.h"
#include "engine/optim/update_gate.h"
#include "engine/model/param_schema.h"
#include "engine/base/host_memory.h"
#include "engine/base/numa.h"
#include "engine/base/status.h"
#include "kernels/bf16.h"

namespace mt {

enum class MemoryLayout { kExact, kCompact };
Result<MemoryLayout> parse_memory_layout(const std::string& name);
const char* memory_layout_name(MemoryLayout l);

// Bytes per parameter of a layout (shadow adds 2).
size_t host_bytes_per_param(MemoryLayout layout, bool shadow);
// Bytes of one gradient, Adam m or Adam v element: fp32 (exact) or bf16 (compact).
size_t state_elem_bytes(MemoryLayout layout);

// Which units hold Adam state (m, v) in this store: all of them (empty), or — the optimizer state
// sharded over several processes (optimizer_shards.h) — only those this process updates. The
// others' m and v are null; their masters arrive from the unit's owner after each update.
using MomentUnits = std::vector<bool>;

// Bytes HostStore::create allocates, by region: each unit's master, grad, m, v (and shadow)
// regions are 4 KiB aligned. The planner counts host memory with this, so plan and store agree
// to the byte.
struct HostStoreBytes {
  uint64_t master = 0, grad = 0, m = 0, v = 0, shadow = 0;
  uint64_t nvme = 0;  // on the NVMe tier's drives (not host memory)
  uint64_t total() const { return master + grad + m + v + shadow; }
};
// tier: the NVMe tier's options (nullptr: none); its units' moments (and masters) are on drives.
HostStoreBytes host_store_bytes(const std::vector<ParamSchema>& units, MemoryLayout layout, bool shadow,
                                const MomentUnits& moments = {}, const NvmeTierOptions* tier = nullptr);
// The units the NVMe tier holds: the decoders and experts (the embedding and the head, read by
// every step's first uses and updated rows first, stay in host memory).
bool nvme_tiered(const ParamSchema& unit);
std::vector<size_t> nvme_unit_numel(const std::vector<ParamSchema>& units);  // per unit: numel if tiered, else 0

// [begin, end) bytes of a store chunk bound to NUMA node `node` (HostStore::numa_runs).
struct NumaRun {
  const void* chunk;
  size_t begin, end;
  int node;
};

// dst = src rounded to bf16 (a unit's shadow from its masters), in pieces on the pool's threads
// (one thread rounds ~1 G values a second: seconds for a 7 B model at every load).
void round_to_bf16_on(ThreadPool& pool, bf16* dst, const float* src, size_t n);

struct HostUnit {
  // On the NVMe tier, m and v are nullptr (and master, when the tier holds masters): reach them
  // through HostStore::acquire.
  bool tiered = false;
  float* master = nullptr;
  // float* (exact) or bf16* (compact); nullptr for a unit of the tier's grad_window, which takes
  // a buffer for each gradient (HostStore::take_grad, grad)
  void* grad = nullptr;
  void* m = nullptr;
  void* v = nullptr;
  bf16* shadow = nullptr;
  size_t numel = 0;
};

class HostStore {
 public:
  static Result<std::unique_ptr<HostStore>> create(const std::vector<ParamSchema>& units, MemoryLayout layout,
                                                   bool shadow, HostAllocator& alloc, const MomentUnits& moments = {},
                                                   const NvmeTierOptions* tier = nullptr,
                                                   const NumaPlacement* numa = nullptr);
  ~HostStore();
  HostStore(const HostStore&) = delete;
  HostStore& operator=(const HostStore&) = delete;

  MemoryLayout layout() const { return layout_; }
  size_t num_units() const { return units_.size(); }
  const HostUnit& unit(size_t i) const { return units_[i]; }
  bool has_moments(size_t i) const { return units_[i].m != nullptr || units_[i].tiered; }
  size_t total_bytes() const { return total_bytes_; }
  size_t total_params() const;
  template <typename S>
  UnitState<S> state(size_t i) const {
    const HostUnit& u = units_[i];
    return {u.master, static_cast<S*>(grad(i)), static_cast<S*>(u.m), static_cast<S*>(u.v), u.shadow};
  }
  // Unit u's gradient buffer. A unit of the tier's grad window (grad_window.h) holds one only
  // from take_grad (the backward, before its gradient is copied down; it waits while every
  // buffer is taken) to give_back_grad (the optimizer, once the unit is updated); the others
  // always hold theirs (take and give back are then no-ops).
  void* grad(size_t u) const { return units_[u].grad ? units_[u].grad : window_ ? window_->held(u) : nullptr; }
  void* take_grad(size_t u) { return units_[u].grad ? units_[u].grad : window_->take(u); }
  void give_back_grad(size_t u) {
    if (!units_[u].grad && window_) window_->give_back(u);
  }
  const GradWindow* grad_window() const { return window_.get(); }  // nullptr: none
  // The AdamW step t (bias correction) of unit u's update in optimizer step `step`: the step
  // itself, except for an expert, which is updated only on the steps that route a token to it
  // (as PyTorch's AdamW skips a parameter without a gradient, its step count included): its
  // own count of updates so far, plus one.
  long adam_step(size_t u, long step) const { return expert_[u] ? updates_[u] + 1 : step; }
  void count_update(size_t u) { ++updates_[u]; }  // unit u's update was applied
  // The experts' update counts in unit order (a checkpoint's), and back; empty for a dense model.
  std::vector<long> expert_updates() const;
  Status set_expert_updates(const std::vector<long>& counts);
  // m = v = 0 (of the units that hold them), update counts 0. masters_follow: the caller writes
  // every unit's masters next (initialisation, a load), so the NVMe tier need not keep its own:
  // it zeroes them too, and the next acquire of each unit reads nothing from the drives.
  // On `pool`'s threads when given.
  void zero_optimizer_state(bool masters_follow = false, ThreadPool* pool = nullptr);
  // A unit's optimizer state (masters, moments, gradient, shadow) where the CPU can read and
  // write it, until release(u, dirty): in memory, or — a unit on the NVMe tier — read into the
  // tier's window. One unit at a time per caller. Errors name the unit and the drive's path.
  template <typename S>
  Result<UnitState<S>> acquire(size_t u);
  Result<float*> acquire_master(size_t u);  // its masters alone (either layout)
  void release(size_t u, bool dirty);
  // acquire, fn (returning a Status), release — written back when `dirty` and fn succeeded.
  template <typename S, typename F>
  Status with_state(size_t u, bool dirty, F&& fn) {
    MT_ASSIGN_OR_RETURN(UnitState<S> st, acquire<S>(u));
    const Status s = fn(st);
    release(u, dirty && s.ok());
    return s;
  }
  template <typename F>
  Status with_master(size_t u, bool dirty, F&& fn) {
    MT_ASSIGN_OR_RETURN(float* m, acquire_master(u));
    const Status s = fn(m);
    release(u, dirty && s.ok());
    return s;
  }
  NvmeTier* tier() const { return tier_.get(); }  // nullptr: none
  // The order the optimizer updates the units in each step (its executor's; 0..U-1 until told):
  // what the NVMe tier reads ahead in and a checkpoint written during training writes in. An
  // order that does not name every unit exactly once is not taken (false; the order stays).
  bool set_update_order(const std::vector<size_t>& units);
  const std::vector<size_t>& update_order() const { return update_order_; }
  // A checkpoint being written (update_gate.h): before_update(u) waits until it has unit u.
  void set_update_gate(std::shared_ptr<UpdateGate> gate) { gate_ = std::move(gate); }
  void before_update(size_t u) const {
    if (const auto g = gate_) g->wait(u);
  }
  void zero_grads(ThreadPool* pool = nullptr);
  // A NUMA placement's plan (numa given and active): byte runs of the chunks, each for the node
  // of the optimizer worker that updates it; and how binding them went — not ok: some or all
  // were not bound (a container may forbid mbind; the store then works unplaced, and this says
  // why). preferred_node (numa.h) reads back what the kernel holds.
  const std::vector<NumaRun>& numa_runs() const { return numa_runs_; }
  const Status& numa_status() const { return numa_status_; }
  // Each unit's bf16 shadow (if it has one) = its masters rounded: after they are written other
  // than by the optimizer (initialisation, a loaded checkpoint or model).
  void refresh_shadows() const;

 private:
  HostStore(MemoryLayout layout, HostAllocator& alloc) : layout_(layout), alloc_(alloc) {}
  Status tier_zero_moments(size_t u);

  MemoryLayout layout_;
  HostAllocator& alloc_;
  std::vector<HostUnit> units_;
  std::vector<char> expert_;    // per unit: an expert (UnitKind::kExpert)
  std::vector<long> updates_;   // per unit: AdamW updates applied (adam_step)
  std::vector<std::pair<void*, size_t>> chunks_;
  std::unique_ptr<NvmeTier> tier_;
  std::unique_ptr<GradWindow> window_;  // the tiered units' gradients (NvmeTierOptions::grad_window)
  std::vector<std::string> names_;  // per unit, for messages
  std::vector<size_t> update_order_;
  std::shared_ptr<UpdateGate> gate_;  // read by the optimizer thread, set between steps
  size_t total_bytes_ = 0;
  std::vector<NumaRun> numa_runs_;
  Status numa_status_;
};

}  // namespace mt

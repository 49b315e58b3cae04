// Barriers and warp-wide operations of the CUDA emulation (cuda_emu.h): __syncthreads and
// __syncwarp, the shuffles' and votes' rendezvous, the per-warp memo of WMMA products, and
// dynamic shared memory.
#include <cstdlib>
#include <cstring>

#include "tests/cuda_emu/block.h"

namespace mt_emu {

void sync_threads() { wait_at(Wait::kBlock); }

void warp_barrier(unsigned mask, int op) {
  Fiber& f = fiber();
  if (!(mask >> (f.tid & 31) & 1u)) fail("__syncwarp or a warp collective by a lane not in its mask");
  f.mask = mask;
  f.op = op;
  wait_at(Wait::kWarp);
}

void sync_warp(unsigned mask) { warp_barrier(mask, kSyncWarp); }

namespace {
// Publishes this lane's bits, waits for the lanes of `mask`, and returns the warp's bank to read
// them from; *wait_again: the caller must sync_warp(mask) after reading (part of a warp).
const uint64_t* rendezvous(unsigned mask, uint64_t bits, int op, bool* wait_again) {
  Block& b = block();
  Fiber& f = fiber();
  const int w = f.tid / 32;
  const bool whole = mask == lanes_of_warp(b, w);
  uint64_t* bank = b.slots.data() + (whole ? f.parity : 2) * b.fibers.size() + size_t(32 * w);
  bank[f.tid & 31] = bits;
  warp_barrier(mask, op);
  if (whole) f.parity ^= 1u;
  *wait_again = !whole;
  return bank;
}
}  // namespace

uint64_t warp_exchange(unsigned mask, uint64_t bits, int src) {
  if (src < 0 || src > 31 || !(mask >> src & 1u)) fail("a shuffle reads a lane outside its mask");
  bool again = false;
  const uint64_t got = rendezvous(mask, bits, kShuffle, &again)[src];
  if (again) warp_barrier(mask, kShuffle);
  return got;
}

unsigned warp_vote(unsigned mask, bool pred) {
  bool again = false;
  const uint64_t* bank = rendezvous(mask, pred ? 1 : 0, kVote, &again);
  unsigned votes = 0;
  for (int l = 0; l < 32; ++l)
    if ((mask >> l & 1u) && bank[l]) votes |= 1u << l;
  if (again) warp_barrier(mask, kVote);
  return votes;
}

bool warp_memo_find(const void* in, size_t in_bytes, void* out, size_t out_bytes) {
  Fiber& f = fiber();
  auto& memo = block().memo[size_t(f.tid / 32)];
  const auto it = memo.find(f.memo_calls++);
  if (it == memo.end()) return false;
  if (it->second.in.size() != in_bytes || std::memcmp(it->second.in.data(), in, in_bytes) != 0)
    fail("lanes of one warp pass different operands to a warp-wide matrix operation");
  std::memcpy(out, it->second.out.data(), out_bytes);
  if (--it->second.readers_left == 0) memo.erase(it);
  return true;
}

void warp_memo_put(const void* in, size_t in_bytes, const void* out, size_t out_bytes) {
  Block& b = block();
  Fiber& f = fiber();
  const int w = f.tid / 32, lanes = __builtin_popcount(lanes_of_warp(b, w));
  if (lanes == 1) return;
  const auto* i = static_cast<const unsigned char*>(in);
  const auto* o = static_cast<const unsigned char*>(out);
  b.memo[size_t(w)].emplace(f.memo_calls - 1, Block::Memo{{i, i + in_bytes}, {o, o + out_bytes}, lanes - 1});
}

void* static_shared_bytes(const char* site, size_t bytes, size_t align) {
  Block& b = block();
  auto& mem = b.statics[site];
  if (!mem) {
    void* p = nullptr;
    if (posix_memalign(&p, align < sizeof(void*) ? sizeof(void*) : align, bytes) != 0) fail("no host memory");
    std::memset(p, 0xff, bytes);  // NaN in fp32 and bf16, as dynamic shared memory
    mem.reset(static_cast<unsigned char*>(p));
  }
  return mem.get();
}

void* dynamic_shared() {
  Block& b = block();
  if (!b.shared) fail("dynamic shared memory used by a launch that requested none");
  return b.shared.get();
}

}  // namespace mt_emu

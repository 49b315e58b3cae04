// Internal to the CUDA emulation (block.cc, warp.cc): the CUDA threads of the block that runs
// now, as fibers, and where each waits.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <functional>
#include <unordered_map>
#include <vector>

#include "tests/cuda_emu/cuda_emu.h"
#include "tests/cuda_emu/fiber.h"

namespace mt_emu {

enum class Wait { kRunnable, kWarp, kBlock, kDone };
// Lanes meeting at a warp barrier must be in the same kind of collective (PTX: the same
// shuffle mode; a __syncwarp does not pair with a shuffle).
enum Collective { kSyncWarp = 1, kShuffle, kVote };

struct Fiber {
  Context ctx;
  ThreadState state;
  Wait wait = Wait::kRunnable;
  unsigned mask = 0;        // the lanes a warp barrier waits for
  int op = 0;               // which kind of warp collective it waits in (Collective)
  unsigned parity = 0;      // which bank this lane's next whole-warp exchange uses
  uint64_t memo_calls = 0;  // warp_memo calls made
  int tid = 0;
};

struct Free {
  void operator()(void* p) const { std::free(p); }
};
using HostBytes = std::unique_ptr<unsigned char, Free>;

struct Block {
  const char* kernel = "";
  const std::function<void()>* body = nullptr;
  std::vector<Fiber> fibers;
  Context scheduler;  // the launching thread, back when no fiber is ready
  // Who runs next and who waits where.
  std::vector<int> ready;  // fibers to run, in order (ready[head..])
  size_t head = 0;
  std::vector<unsigned> waiting;  // per warp: lanes waiting at a warp barrier
  std::vector<unsigned> exited;   // per warp: lanes that have returned
  int live = 0;                   // threads not returned
  int at_block = 0;               // of them, waiting in __syncthreads
  // warp_exchange's publications: banks 0 and 1 take whole-warp exchanges in turn (a lane
  // cannot reach its next-but-one exchange before every lane has read this one, so one barrier
  // is enough); bank 2 takes those of part of a warp, which wait again after reading.
  std::vector<uint64_t> slots;
  // Dynamic shared memory: exactly the launch's bytes (ASan sees an overrun), 128-byte aligned.
  HostBytes shared;
  size_t shared_bytes = 0;
  std::unordered_map<const char*, HostBytes> statics;  // static __shared__ arrays, by site
  bool reverse = false;  // this block runs and releases its threads highest first
  struct Memo {
    std::vector<unsigned char> in, out;
    int readers_left;
  };
  std::vector<std::unordered_map<uint64_t, Memo>> memo;  // per warp, by call number
};

Block& block();  // the block running now (fails outside a kernel)
Fiber& fiber();  // the CUDA thread running now
[[noreturn]] void fail(const char* what);
// This thread waits (at a barrier: `w`), and runs again when the barrier opens.
void wait_at(Wait w);
// A warp barrier for the lanes of `mask`, in a collective of kind `op`.
void warp_barrier(unsigned mask, int op);
// The lanes warp w of the block has (all 32 but in a short last warp).
unsigned lanes_of_warp(const Block& b, int w);
// Runs a launched kernel now, on this host thread (its stream has reached it).
void run_kernel(const Config& c, const char* name, const std::function<void()>& body);

}  // namespace mt_emu

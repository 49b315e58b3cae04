// The NVMe tier of the HostStore: the Adam moments (and, as a further level, the fp32 masters)
// of the tiered units live in files on local drives — one file per path, the units striped over
// them, each region aligned for direct I/O — and are read into a bounded window of host buffers
// ahead of the optimizer's unit order, then written back behind it, by a pool of I/O threads
// (pread/pwrite with O_DIRECT, in chunks, so one unit's transfer uses every thread). A unit is
// resident only between acquire() and release(); a clean resident unit stays cached in its slot
// until the slot is needed. The files are scratch: a crash resumes from the last checkpoint.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/base/direct_file.h"
#include "engine/base/status.h"

namespace mt {

struct NvmeTierOptions {
  std::vector<std::string> paths;  // directories, one tier file each; units striped over them
  bool masters = false;            // the fp32 masters too (else only the moments)
  int window = 4;                  // units resident at once
  int io_threads = 4;
  size_t chunk_bytes = size_t(8) << 20;  // one pread/pwrite
  // > 0: the tiered units' gradients share this many buffers in host memory instead of one
  // each (grad_window.h): only where each unit is updated as its gradient lands (grad_clip 0).
  int grad_window = 0;
};

// Where the tier keeps each unit: its file (one per path; -1: not tiered), its offset there and
// its moments' and masters' bytes, each rounded up to whole pages for direct I/O.
struct NvmeRegion {
  int file = -1;
  uint64_t offset = 0, m_bytes = 0, v_bytes = 0, master_bytes = 0;
  uint64_t bytes() const { return m_bytes + v_bytes + master_bytes; }
};
struct NvmeLayout {
  std::vector<NvmeRegion> regions;  // per unit
  std::vector<uint64_t> file_bytes;  // per path
  uint64_t largest = 0;              // the largest region: one window slot
  uint64_t total() const;
};
// unit_numel[u]: elements of unit u when it is tiered, 0 when it is not; state_bytes: bytes of
// one moment element (fp32 4, bf16 2). Units are striped over the paths one by one.
NvmeLayout nvme_tier_layout(const NvmeTierOptions& opt, const std::vector<size_t>& unit_numel, size_t state_bytes);

class NvmeTier {
 public:
  // One scratch file per path (DirectFile::create_scratch), laid out by nvme_tier_layout.
  static Result<std::unique_ptr<NvmeTier>> create(const NvmeTierOptions& opt, const std::vector<size_t>& unit_numel,
                                                  size_t state_bytes);
  ~NvmeTier();
  NvmeTier(const NvmeTier&) = delete;
  NvmeTier& operator=(const NvmeTier&) = delete;

  // Where a resident unit's state is, until its release.
  struct Slot {
    void* m = nullptr;
    void* v = nullptr;
    float* master = nullptr;  // with opt.masters
  };
  // The order the caller acquires units in, repeated every step: what the window reads ahead.
  void set_order(std::vector<size_t> order);
  // Blocks until unit u is resident (read ahead, or read now). An I/O failure, this one's or an
  // earlier one's, is returned naming the path and the unit (sticky: the tier is then unusable).
  Result<Slot> acquire(size_t u);
  // dirty: its state changed, and is written back (asynchronously; the slot is reused after).
  void release(size_t u, bool dirty);
  enum class Part { kM, kV, kMaster };
  // Bytes [offset, offset + n) of unit u's part as the drive holds it, into dst: what a
  // checkpoint writer reads, from any thread, without the window (call flush() first: every
  // write-back done). Errors name the path and the unit.
  Status read_part(size_t u, Part part, uint64_t offset, size_t n, void* dst);
  Status flush();     // every write-back done; the first error
  void zero_all();    // every unit's state reads as zeros from now on (no I/O until written)
  Status error() const;
  uint64_t file_bytes() const { return file_bytes_; }  // over all paths
  bool masters() const { return opt_.masters; }
  uint64_t bytes_read() const;
  uint64_t bytes_written() const;
  // Tests: the n-th transfer from now fails as an I/O error of the drive would.
  void inject_io_error(long after_transfers);

 private:
  enum class State { kEmpty, kReading, kReady, kInUse, kWriting };
  struct SlotInfo {
    long unit = -1;
    State state = State::kEmpty;
    int pending = 0;  // transfers in flight
    long last_use = 0;
    AlignedBuffer buf;
  };
  struct Transfer {
    int slot;
    bool write;
    size_t unit;
    uint64_t at;  // within the unit's region (and the slot's buffer)
    size_t n;
  };
  NvmeTier(const NvmeTierOptions& opt) : opt_(opt) {}
  void io_loop();
  void start(int slot, size_t unit, bool write);  // lock held
  int slot_of(size_t unit) const;                 // lock held; -1 when not resident
  // lock held: a slot free to take (empty, or clean and not among the next `window` units of the
  // order; `any`: or the least recently used clean one), or -1.
  int victim(bool any);
  bool upcoming(long unit) const;                 // lock held: among the next `window` units
  void read_ahead();                              // lock held
  Slot view(int slot, size_t unit) const;
  void fail(const Status& s);                     // lock held

  NvmeTierOptions opt_;
  std::vector<DirectFile> files_;
  NvmeLayout layout_;
  std::vector<SlotInfo> slots_;
  std::vector<char> zero_;  // per unit: reads as zeros (no write since zero_all)
  std::vector<int> demand_;  // per unit: callers waiting in acquire() for it
  std::vector<size_t> order_;
  std::vector<long> position_;  // per unit: its place in order_ (-1: none)
  size_t cursor_ = 0;  // the place in order_ of the next unit the caller will acquire
  uint64_t file_bytes_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Transfer> queue_;
  std::vector<std::thread> io_;
  bool stop_ = false;
  long clock_ = 0;
  long inject_after_ = -1;
  uint64_t read_ = 0, written_ = 0;
  Status error_;
};

}  // namespace mt

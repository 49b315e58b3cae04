// MappedFile and the SIGBUS handler that turns a truncated mapping into an error (mapped_file.h).
#include "engine/io/mapped_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "engine/base/confined_open.h"
#include "engine/base/hash.h"

namespace mt {

namespace {

// The live mappings, read by the handler without a lock. A slot changes under a seqlock: `gen` is
// odd while begin/end are rewritten, so a handler racing a slot's reuse never pairs one mapping's
// begin with another's end. A begin of 0 is a free slot. Blocks are allocated once, never freed.
struct WatchedRange {
  std::atomic<uint32_t> gen{0};
  std::atomic<uintptr_t> begin{0}, end{0};
  std::atomic<bool> torn{false};
};
constexpr size_t kBlockSlots = 1024, kBlocks = MappedFile::kMaxMappings / kBlockSlots;
std::atomic<WatchedRange*> g_blocks[kBlocks];
uintptr_t g_page = 4096;
struct sigaction g_previous {};

WatchedRange& range_at(int slot) { return g_blocks[size_t(slot) / kBlockSlots].load()[size_t(slot) % kBlockSlots]; }

void set_range(WatchedRange& r, uintptr_t begin, uintptr_t end) {
  const uint32_t g = r.gen.load(std::memory_order_relaxed);
  r.gen.store(g + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  r.begin.store(begin, std::memory_order_relaxed);
  r.end.store(end, std::memory_order_relaxed);
  r.gen.store(g + 2, std::memory_order_release);
}

// The watched mapping holding `addr`, as one consistent [begin, end); nullptr if none holds it.
WatchedRange* find_range(uintptr_t addr, uintptr_t& end) {
  for (auto& block : g_blocks) {
    WatchedRange* r = block.load(std::memory_order_acquire);
    if (!r) return nullptr;
    for (size_t i = 0; i < kBlockSlots; ++i) {
      const uint32_t g = r[i].gen.load(std::memory_order_acquire);
      const uintptr_t begin = r[i].begin.load(std::memory_order_relaxed);
      end = r[i].end.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (g % 2 == 1 || r[i].gen.load(std::memory_order_relaxed) != g) continue;  // being rewritten
      if (begin != 0 && addr >= begin && addr < end) return &r[i];
    }
  }
  return nullptr;
}

// A read past a file's end (or a page the kernel could not read in): zeros from the faulting page
// to the end of its mapping, marked torn first so that no reader sees those zeros as intact.
bool absorb_fault(const siginfo_t* info) {
  if (!info || info->si_code != BUS_ADRERR) return false;
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  uintptr_t end = 0;
  WatchedRange* r = find_range(addr, end);
  if (!r) return false;
  r->torn.store(true, std::memory_order_seq_cst);
  const uintptr_t page = addr & ~(g_page - 1);
  return ::mmap(reinterpret_cast<void*>(page), end - page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
                0) != MAP_FAILED;
}

bool is_fault(const siginfo_t* info) {
  return info && (info->si_code == BUS_ADRALN || info->si_code == BUS_ADRERR || info->si_code == BUS_OBJERR ||
                  info->si_code == BUS_MCEERR_AR);
}

// What SIGBUS would have done without this handler: the handler before it, or the default action.
void pass_on(int sig, siginfo_t* info, void* context) {
  if (g_previous.sa_handler == SIG_IGN && info && info->si_code <= 0) return;  // a sent one, ignored
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    if (g_previous.sa_flags & SA_SIGINFO) return g_previous.sa_sigaction(sig, info, context);
    return g_previous.sa_handler(sig);
  }
  // The default: a fault repeats when the handler returns, anything else is raised again; either
  // way it is delivered as soon as this returns and ends the process by SIGBUS.
  ::signal(SIGBUS, SIG_DFL);
  if (!is_fault(info)) ::raise(SIGBUS);
}

void on_sigbus(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  const bool absorbed = absorb_fault(info);
  errno = saved_errno;
  if (!absorbed) pass_on(sig, info, context);  // else the faulting read runs again, on zeros
}

// Installs the handler with the first mapping (under g_slots_mu). One installed after it is left
// in place: it may chain to this one, and putting this one back over it would make a loop.
void install_handler_once() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  g_page = uintptr_t(::sysconf(_SC_PAGESIZE));
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, &g_previous);
}

std::mutex g_slots_mu;
std::vector<int> g_free_slots;  // under g_slots_mu
size_t g_slots_made = 0;        // under g_slots_mu

// A slot watching [data, data + size), or -1 when all kMaxMappings are taken.
int watch(const uint8_t* data, size_t size) {
  std::lock_guard<std::mutex> lock(g_slots_mu);
  install_handler_once();
  if (g_free_slots.empty()) {
    if (g_slots_made == kBlocks) return -1;
    auto* block = new WatchedRange[kBlockSlots];
    for (size_t i = kBlockSlots; i-- > 0;) g_free_slots.push_back(int(g_slots_made * kBlockSlots + i));
    g_blocks[g_slots_made++].store(block, std::memory_order_release);
  }
  const int slot = g_free_slots.back();
  g_free_slots.pop_back();
  WatchedRange& r = range_at(slot);
  r.torn.store(false);
  set_range(r, reinterpret_cast<uintptr_t>(data), reinterpret_cast<uintptr_t>(data) + size);
  return slot;
}

void unwatch(int slot) {
  std::lock_guard<std::mutex> lock(g_slots_mu);
  set_range(range_at(slot), 0, 0);
  g_free_slots.push_back(slot);
}

// The last nonzero byte of the file's last page, or SIZE_MAX if that page is all zeros. A file
// cut within its last page never faults (the kernel zeros the page's tail), so intact() reads
// this byte: zero now means nonzero bytes were cut; bytes cut past it were zeros all along.
size_t last_nonzero_in_last_page(const uint8_t* data, size_t size) {
  for (size_t i = size, first = (size - 1) & ~size_t(g_page - 1); i-- > first;)
    if (data[i] != 0) return i;
  return SIZE_MAX;
}

}  // namespace

Result<std::unique_ptr<MappedFile>> MappedFile::open(const std::string& path) {
  MT_ASSIGN_OR_RETURN(const OwnedFd fd, open_regular_file("cannot open", path));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return data_loss("cannot stat '" + path + "': " + std::strerror(errno));
  std::unique_ptr<MappedFile> m(new MappedFile());
  m->path_ = path;
  m->size_ = size_t(st.st_size);
  if (m->size_ == 0) return m;
  void* p = ::mmap(nullptr, m->size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (p == MAP_FAILED) return data_loss("cannot map '" + path + "': " + std::strerror(errno));
  m->data_ = static_cast<const uint8_t*>(p);
  m->slot_ = watch(m->data_, m->size_);
  if (m->slot_ < 0)
    return resource_exhausted("cannot map '" + path + "': " + std::to_string(kMaxMappings) + " files are mapped already");
  m->tail_probe_ = last_nonzero_in_last_page(m->data_, m->size_);
  return m;
}

MappedFile::~MappedFile() {
  if (slot_ >= 0) unwatch(slot_);
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

Status MappedFile::intact() const {
  if (slot_ < 0) return Status::Ok();
  WatchedRange& r = range_at(slot_);
  if (tail_probe_ != SIZE_MAX && static_cast<const volatile uint8_t*>(data_)[tail_probe_] == 0) r.torn.store(true);
  if (!r.torn.load(std::memory_order_seq_cst)) return Status::Ok();
  return data_loss("'" + path_ + "' changed while it was being read: it shrank (it was " + std::to_string(size_) +
                   " bytes when opened) or a page of it could not be read. A file a job reads must not be modified "
                   "while the job runs");
}

std::string MappedFile::sampled_fingerprint() const {
  constexpr size_t kSamples = 64, kBytes = 256;
  uint64_t h = fnv1a64(std::to_string(size_));
  for (size_t i = 0; i < kSamples && size_ > 0; ++i) {
    const size_t at = size_ / kSamples * i, n = std::min(kBytes, size_ - at);
    h = fnv1a64(std::string_view(reinterpret_cast<const char*>(data_ + at), n), h);
  }
  return hex64(h);
}

}  // namespace mt

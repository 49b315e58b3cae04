// MappedFile and the SIGBUS handler that turns a truncated mapping into an error (mapped_file.h).
#include "engine/io/mapped_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "engine/base/confined_open.h"

namespace mt {

namespace {

// The live mappings, read by the handler without a lock: a slot's end is stored before its begin,
// and a begin of 0 is a free slot. Blocks are allocated once and never freed.
struct WatchedRange {
  std::atomic<uintptr_t> begin{0}, end{0};
  std::atomic<bool> torn{false};
};
constexpr size_t kBlockSlots = 1024, kBlocks = MappedFile::kMaxMappings / kBlockSlots;
std::atomic<WatchedRange*> g_blocks[kBlocks];
uintptr_t g_page = 4096;
struct sigaction g_previous {};

WatchedRange& range_at(int slot) { return g_blocks[size_t(slot) / kBlockSlots].load()[size_t(slot) % kBlockSlots]; }

// Zeros from the faulting page to the end of the mapping holding `addr`; false if none holds it.
bool absorb_fault(uintptr_t addr) {
  for (auto& block : g_blocks) {
    WatchedRange* r = block.load(std::memory_order_acquire);
    if (!r) return false;
    for (size_t i = 0; i < kBlockSlots; ++i) {
      const uintptr_t begin = r[i].begin.load(std::memory_order_acquire);
      const uintptr_t end = r[i].end.load(std::memory_order_relaxed);
      if (begin == 0 || addr < begin || addr >= end) continue;
      const uintptr_t page = addr & ~(g_page - 1);
      void* p = ::mmap(reinterpret_cast<void*>(page), end - page, PROT_READ,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
      if (p == MAP_FAILED) return false;
      r[i].torn.store(true, std::memory_order_release);
      return true;
    }
  }
  return false;
}

void on_sigbus(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  const bool absorbed = info && absorb_fault(reinterpret_cast<uintptr_t>(info->si_addr));
  errno = saved_errno;
  if (absorbed) return;  // the faulting read runs again, on zeros
  if ((g_previous.sa_flags & SA_SIGINFO) && g_previous.sa_sigaction) return g_previous.sa_sigaction(sig, info, context);
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) return g_previous.sa_handler(sig);
  // No handler before ours: restore the default, and the fault, repeated on return, ends the
  // process by SIGBUS as it would have without us (a raised SIGBUS is delivered at once).
  ::signal(SIGBUS, SIG_DFL);
  if (!info || info->si_code <= 0) ::raise(SIGBUS);
}

void install_handler_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_page = uintptr_t(::sysconf(_SC_PAGESIZE));
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_previous);
  });
}

std::mutex g_slots_mu;
std::vector<int> g_free_slots;  // under g_slots_mu
size_t g_slots_made = 0;        // under g_slots_mu

// A slot watching [data, data + size), or -1 when all kMaxMappings are taken.
int watch(const uint8_t* data, size_t size) {
  install_handler_once();
  std::lock_guard<std::mutex> lock(g_slots_mu);
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
  r.end.store(reinterpret_cast<uintptr_t>(data) + size);
  r.begin.store(reinterpret_cast<uintptr_t>(data), std::memory_order_release);
  return slot;
}

void unwatch(int slot) {
  range_at(slot).begin.store(0, std::memory_order_release);
  std::lock_guard<std::mutex> lock(g_slots_mu);
  g_free_slots.push_back(slot);
}

}  // namespace

Result<std::unique_ptr<MappedFile>> MappedFile::open(const std::string& path) {
  MT_ASSIGN_OR_RETURN(const OwnedFd fd, open_confined_or_status("cannot open", path, O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return invalid_argument("'" + path + "' is not a regular file");
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
  return m;
}

MappedFile::~MappedFile() {
  if (slot_ >= 0) unwatch(slot_);
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

Status MappedFile::intact() const {
  if (slot_ < 0 || !range_at(slot_).torn.load(std::memory_order_acquire)) return Status::Ok();
  return data_loss("'" + path_ + "' shrank while it was being read (it was " + std::to_string(size_) +
                   " bytes when opened): a file a job reads must not be modified while the job runs");
}

}  // namespace mt

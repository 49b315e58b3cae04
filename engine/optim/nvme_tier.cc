#include "engine/optim/nvme_tier.h"

#include <algorithm>
#include <cstring>

namespace mt {

uint64_t NvmeLayout::total() const {
  uint64_t t = 0;
  for (uint64_t b : file_bytes) t += b;
  return t;
}

NvmeLayout nvme_tier_layout(const NvmeTierOptions& opt, const std::vector<size_t>& unit_numel, size_t state_bytes) {
  NvmeLayout l;
  l.file_bytes.assign(std::max<size_t>(opt.paths.size(), 1), 0);
  size_t tiered = 0;
  for (size_t numel : unit_numel) {
    NvmeRegion r;
    if (numel > 0) {
      r.file = int(tiered++ % l.file_bytes.size());
      r.offset = l.file_bytes[size_t(r.file)];
      r.m_bytes = r.v_bytes = direct_round_up(numel * state_bytes);
      r.master_bytes = opt.masters ? direct_round_up(numel * sizeof(float)) : 0;
      l.file_bytes[size_t(r.file)] += r.bytes();
      l.largest = std::max(l.largest, r.bytes());
    }
    l.regions.push_back(r);
  }
  return l;
}

Result<std::unique_ptr<NvmeTier>> NvmeTier::create(const NvmeTierOptions& opt, const std::vector<size_t>& unit_numel,
                                                   size_t state_bytes) {
  if (opt.paths.empty()) return invalid_argument("the NVMe tier needs at least one path");
  if (opt.window < 1 || opt.io_threads < 1 || opt.chunk_bytes == 0 || opt.chunk_bytes % kDirectAlign != 0)
    return invalid_argument("the NVMe tier needs window >= 1, io_threads >= 1 and chunks of whole 4 KiB pages");
  std::unique_ptr<NvmeTier> t(new NvmeTier(opt));
  t->layout_ = nvme_tier_layout(opt, unit_numel, state_bytes);
  for (size_t p = 0; p < opt.paths.size(); ++p) {
    MT_ASSIGN_OR_RETURN(DirectFile f, DirectFile::create_scratch(opt.paths[p], t->layout_.file_bytes[p]));
    t->files_.push_back(std::move(f));
  }
  t->file_bytes_ = t->layout_.total();
  t->slots_.resize(size_t(opt.window));
  for (SlotInfo& s : t->slots_) {
    MT_ASSIGN_OR_RETURN(s.buf, AlignedBuffer::allocate(t->layout_.largest));
  }
  t->zero_.assign(unit_numel.size(), 1);
  t->demand_.assign(unit_numel.size(), 0);
  t->position_.assign(unit_numel.size(), -1);
  for (int i = 0; i < opt.io_threads; ++i) t->io_.emplace_back([p = t.get()] { p->io_loop(); });
  return t;
}

NvmeTier::~NvmeTier() {
  {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return queue_.empty(); });  // nothing half-written behind a caller's back
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : io_) t.join();
}

void NvmeTier::set_order(std::vector<size_t> order) {
  std::lock_guard<std::mutex> l(mu_);
  order_ = std::move(order);
  std::fill(position_.begin(), position_.end(), -1);
  for (size_t i = 0; i < order_.size(); ++i) position_[order_[i]] = long(i);
  cursor_ = 0;
  read_ahead();
}

int NvmeTier::slot_of(size_t unit) const {
  for (size_t s = 0; s < slots_.size(); ++s)
    if (slots_[s].unit == long(unit)) return int(s);
  return -1;
}

bool NvmeTier::upcoming(long unit) const {
  for (size_t i = 0; i < slots_.size() && i < order_.size(); ++i)
    if (long(order_[(cursor_ + i) % order_.size()]) == unit) return true;
  return false;
}

int NvmeTier::victim(bool any) {
  int best = -1;
  for (size_t s = 0; s < slots_.size(); ++s) {
    const SlotInfo& si = slots_[s];
    if (si.state == State::kEmpty) return int(s);
    // A unit a caller is waiting in acquire() for is never evicted: read ahead evicting it as its
    // read completed, and the caller evicting the read-ahead unit in turn, looped forever.
    if (si.state != State::kReady || demand_[size_t(si.unit)] > 0 || (!any && upcoming(si.unit))) continue;
    if (best < 0 || si.last_use < slots_[size_t(best)].last_use) best = int(s);
  }
  return best;
}

NvmeTier::Slot NvmeTier::view(int slot, size_t unit) const {
  const NvmeRegion& r = layout_.regions[unit];
  char* b = slots_[size_t(slot)].buf.data();
  return {b, b + r.m_bytes, r.master_bytes ? reinterpret_cast<float*>(b + r.m_bytes + r.v_bytes) : nullptr};
}

// Reads fill the slot from the unit's region (zeros without I/O while it has never been
// written); writes send the slot back. Either way in chunks, one transfer each, to the pool.
void NvmeTier::start(int slot, size_t unit, bool write) {
  SlotInfo& si = slots_[size_t(slot)];
  const NvmeRegion& r = layout_.regions[unit];
  si.unit = long(unit);
  si.last_use = ++clock_;
  if (!write && zero_[unit]) {
    std::memset(si.buf.data(), 0, r.bytes());
    si.state = State::kReady;
    return;
  }
  si.state = write ? State::kWriting : State::kReading;
  for (uint64_t at = 0; at < r.bytes(); at += opt_.chunk_bytes) {
    queue_.push_back({slot, write, unit, at, size_t(std::min<uint64_t>(opt_.chunk_bytes, r.bytes() - at))});
    ++si.pending;
  }
  cv_.notify_all();
}

void NvmeTier::read_ahead() {
  if (!error_.ok() || order_.empty()) return;
  for (size_t i = 0; i < slots_.size() && i < order_.size(); ++i) {
    const size_t u = order_[(cursor_ + i) % order_.size()];
    if (slot_of(u) >= 0) continue;
    const int v = victim(false);
    if (v < 0) return;
    start(v, u, false);
  }
}

void NvmeTier::fail(const Status& s) {
  if (error_.ok()) error_ = s;
  cv_.notify_all();
}

void NvmeTier::io_loop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;
    const Transfer t = queue_.front();
    queue_.pop_front();
    const NvmeRegion& r = layout_.regions[t.unit];
    const DirectFile& f = files_[size_t(r.file)];
    char* buf = slots_[size_t(t.slot)].buf.data() + t.at;
    const bool injected = inject_after_ >= 0 && inject_after_-- == 0;
    l.unlock();
    Status s = injected ? Status(StatusCode::kDataLoss, "error " + std::string(t.write ? "writing" : "reading") +
                                                             " '" + f.path() + "': Input/output error (injected)")
                        : t.write ? f.write(buf, t.n, r.offset + t.at)
                                  : f.read(buf, t.n, r.offset + t.at);
    l.lock();
    (t.write ? written_ : read_) += t.n;
    if (!s.ok()) fail(s.with_context("the NVMe tier's unit " + std::to_string(t.unit)));
    SlotInfo& si = slots_[size_t(t.slot)];
    if (--si.pending == 0) {
      si.state = State::kReady;
      if (t.write) zero_[t.unit] = 0;
      read_ahead();  // a slot written back is free for the next unit of the order
      cv_.notify_all();
    }
  }
}

Result<NvmeTier::Slot> NvmeTier::acquire(size_t u) {
  std::unique_lock<std::mutex> l(mu_);
  ++demand_[u];
  struct Done {
    int& d;
    ~Done() { --d; }
  } done{demand_[u]};
  for (;;) {
    if (!error_.ok()) return error_;
    if (const int s = slot_of(u); s >= 0) {
      SlotInfo& si = slots_[size_t(s)];
      if (si.state == State::kInUse) return internal_error("the NVMe tier's unit " + std::to_string(u) + " was acquired twice");
      if (si.state == State::kReady) {
        si.state = State::kInUse;
        si.last_use = ++clock_;
        if (position_[u] >= 0) cursor_ = (size_t(position_[u]) + 1) % order_.size();
        read_ahead();
        return view(s, u);
      }
    } else if (const int v = victim(true); v >= 0) {
      start(v, u, false);
      continue;
    }
    cv_.wait(l);  // a transfer of it, or a slot to take, is under way
  }
}

void NvmeTier::release(size_t u, bool dirty) {
  std::lock_guard<std::mutex> l(mu_);
  const int s = slot_of(u);
  if (s < 0 || slots_[size_t(s)].state != State::kInUse) return;
  if (dirty) start(s, u, true);
  else slots_[size_t(s)].state = State::kReady;
  read_ahead();
  cv_.notify_all();
}

Status NvmeTier::read_part(size_t u, Part part, uint64_t offset, size_t n, void* dst) {
  const NvmeRegion& r = layout_.regions[u];
  const uint64_t base = part == Part::kM ? 0 : part == Part::kV ? r.m_bytes : r.m_bytes + r.v_bytes;
  const uint64_t limit = part == Part::kM ? r.m_bytes : part == Part::kV ? r.v_bytes : r.master_bytes;
  if (r.file < 0 || offset + n > limit) return internal_error("the NVMe tier's unit " + std::to_string(u) + " has no such bytes");
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!error_.ok()) return error_;
    if (zero_[u]) {  // never written: zeros
      std::memset(dst, 0, n);
      return Status::Ok();
    }
  }
  // Whole pages around the bytes, through an aligned buffer (direct I/O takes nothing else).
  const uint64_t at = r.offset + base + offset, first = at / kDirectAlign * kDirectAlign;
  const uint64_t end = direct_round_up(at + n);
  MT_ASSIGN_OR_RETURN(AlignedBuffer b, AlignedBuffer::allocate(end - first));
  const Status s = files_[size_t(r.file)].read(b.data(), end - first, first);
  if (!s.ok()) return s.with_context("the NVMe tier's unit " + std::to_string(u));
  std::memcpy(dst, b.data() + (at - first), n);
  std::lock_guard<std::mutex> l(mu_);
  read_ += end - first;
  return Status::Ok();
}

Status NvmeTier::flush() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] {
    return std::none_of(slots_.begin(), slots_.end(),
                        [](const SlotInfo& s) { return s.state == State::kWriting || s.state == State::kReading; });
  });
  return error_;
}

void NvmeTier::zero_all() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return queue_.empty() && std::none_of(slots_.begin(), slots_.end(), [](const SlotInfo& s) {
                             return s.pending > 0;
                           }); });
  std::fill(zero_.begin(), zero_.end(), 1);
  for (SlotInfo& s : slots_) s.unit = -1, s.state = State::kEmpty;
  read_ahead();
}

Status NvmeTier::error() const {
  std::lock_guard<std::mutex> l(mu_);
  return error_;
}

uint64_t NvmeTier::bytes_read() const {
  std::lock_guard<std::mutex> l(mu_);
  return read_;
}

uint64_t NvmeTier::bytes_written() const {
  std::lock_guard<std::mutex> l(mu_);
  return written_;
}

void NvmeTier::inject_io_error(long after_transfers) {
  std::lock_guard<std::mutex> l(mu_);
  inject_after_ = after_transfers;
}

}  // namespace mt

#include "engine/dist/nccl_group.h"

#include <algorithm>
#include <cstdio>

namespace mt {

namespace {

// Whether everything `e` marks has run. A failed query counts as done: the stream has failed,
// and its backend reports that itself (nothing waits forever on a lost device).
bool event_done(cudaEvent_t e, int device) {
  if (!e) return true;
  if (cudaSetDevice(device) != cudaSuccess) (void)cudaGetLastError();
  const cudaError_t r = cudaEventQuery(e);
  if (r != cudaSuccess) (void)cudaGetLastError();  // "not ready" must not surface at a later call
  return r != cudaErrorNotReady;
}

Result<cudaEvent_t> record_event(cudaStream_t stream) {
  cudaEvent_t e = nullptr;
  cudaError_t r = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  if (r == cudaSuccess) {
    r = cudaEventRecord(e, stream);
    if (r != cudaSuccess) cudaEventDestroy(e);
  }
  if (r == cudaSuccess) return e;
  (void)cudaGetLastError();
  return internal_error(std::string("recording a CUDA event: ") + cudaGetErrorString(r));
}

void destroy_events(cudaEvent_t a, cudaEvent_t b) {
  if (a) cudaEventDestroy(a);
  if (b) cudaEventDestroy(b);
}

const char* type_name(CommType t) { return t == CommType::kF64 ? "f64" : "f32"; }

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", s);
  return buf;
}

void append(std::string& list, const std::string& item) { list += (list.empty() ? "" : ", ") + item; }

}  // namespace

Status nccl_status(ncclResult_t r, const std::string& what) {
  if (r == ncclSuccess) return Status::Ok();
  return internal_error("NCCL " + what + ": " + ncclGetErrorString(r));
}

NcclGroup::NcclGroup(std::vector<ncclComm_t> comms, std::vector<int> devices, const CommOptions& opt) : opt_(opt) {
  for (size_t r = 0; r < comms.size(); ++r) {
    ranks_.push_back(std::make_unique<Rank>());
    ranks_.back()->comm = comms[r];
    ranks_.back()->device = devices[r];
  }
  watchdog_ = std::thread([this] { watch(); });
}

NcclGroup::~NcclGroup() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  watchdog_.join();
  bool abort = !failed().ok();
  for (auto& k : ranks_)
    for (const InFlight& f : k->in_flight) abort = abort || !event_done(f.end, k->device);
  if (abort) abort_all();
  for (auto& k : ranks_) {
    std::lock_guard<std::mutex> l(k->mu);
    if (!k->aborted) {
      if (cudaSetDevice(k->device) != cudaSuccess) (void)cudaGetLastError();
      (void)ncclCommDestroy(k->comm);
      k->aborted = true;
    }
    for (const InFlight& f : k->in_flight) destroy_events(f.start, f.end);
  }
}

std::string NcclGroup::describe(int rank, long seq, const NcclOp& op) const {
  return "NCCL " + std::string(op.name) + " #" + std::to_string(seq) + " (" + std::to_string(op.n) + " " +
         type_name(op.type) + ") on rank " + std::to_string(rank) + " (CUDA device " + std::to_string(device(rank)) + ")";
}

Status NcclGroup::issue(int rank, const NcclOp& op, const std::function<ncclResult_t(ncclComm_t)>& launch) {
  Rank& k = *ranks_[size_t(rank)];
  long seq = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!failed_.ok()) return failed_;
    seq = ++k.issued;
  }
  const auto since = Clock::now();
  // This rank cannot take part: the others would wait for it, so the group fails now, naming it.
  const auto fail_here = [&](const Status& why, cudaEvent_t a, cudaEvent_t b) {
    destroy_events(a, b);
    fail(Status(StatusCode::kUnavailable, describe(rank, seq, op) + " failed: " + why.message()));
    return failed();
  };
  auto start = record_event(op.stream);
  if (!start.ok()) return fail_here(start.status(), nullptr, nullptr);
  ncclResult_t r = ncclSuccess;
  bool aborted = false;
  {
    std::lock_guard<std::mutex> l(k.mu);
    aborted = k.aborted;
    if (!aborted) r = launch(k.comm);
  }
  if (aborted) {  // the group failed since the check above
    destroy_events(*start, nullptr);
    return failed();
  }
  // From here the collective may be on the stream: if this call fails, what it writes is suspect.
  const auto fail_launched = [&](const Status& why, cudaEvent_t a, cudaEvent_t b) {
    const Status s = fail_here(why, a, b);
    if (op.backend) op.backend->set_error(s);
    return s;
  };
  Status launched = r == ncclInProgress ? finish_launch(rank, seq, op, since) : nccl_status(r, "launch");
  if (!launched.ok()) return fail_launched(launched, *start, nullptr);
  auto end = record_event(op.stream);
  if (!end.ok()) return fail_launched(end.status(), *start, nullptr);
  {
    std::lock_guard<std::mutex> l(mu_);
    if (failed_.ok()) {  // else the group failed (and aborted it) before the watchdog could see it
      k.in_flight.push_back({seq, op, *start, *end, std::nullopt});
      return Status::Ok();
    }
  }
  return fail_launched(failed(), *start, *end);
}

// A non-blocking communicator finishes the launch in the background (the first collective also
// connects to the peers, which needs them to issue theirs); NCCL may not be called on it, nor
// kernels enqueued on the stream, until its state is no longer ncclInProgress.
Status NcclGroup::finish_launch(int rank, long seq, const NcclOp& op, Clock::time_point since) {
  Rank& k = *ranks_[size_t(rank)];
  for (;;) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    ncclResult_t state = ncclInProgress;
    {
      std::lock_guard<std::mutex> l(k.mu);
      if (k.aborted) return failed();
      const ncclResult_t q = ncclCommGetAsyncError(k.comm, &state);
      if (q != ncclSuccess) state = q;
    }
    if (state == ncclSuccess) return Status::Ok();
    if (state != ncclInProgress) return nccl_status(state, "launch");
    if (Status f = failed(); !f.ok()) return f;
    if (std::chrono::duration<double>(Clock::now() - since).count() > opt_.timeout_seconds) {
      std::lock_guard<std::mutex> l(mu_);
      return Status(StatusCode::kUnavailable, "its launch did not finish within " + seconds(opt_.timeout_seconds) +
                                                  " s: " + late_ranks(seq));
    }
  }
}

void NcclGroup::fail(const Status& why) {
  if (why.ok()) return;
  std::vector<Backend*> suspect;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!failed_.ok()) return;  // the first failure is the reason; its caller aborts
    failed_ = why;
    // Only collectives still running: a finished one's backend may already be gone.
    for (auto& k : ranks_)
      for (const InFlight& f : k->in_flight)
        if (f.op.backend && !event_done(f.end, k->device)) suspect.push_back(f.op.backend);
  }
  std::sort(suspect.begin(), suspect.end());
  suspect.erase(std::unique(suspect.begin(), suspect.end()), suspect.end());
  for (Backend* b : suspect) b->set_error(why);  // before the abort lets the streams run on
  abort_all();
  cv_.notify_all();
}

Status NcclGroup::failed() const {
  std::lock_guard<std::mutex> l(mu_);
  return failed_;
}

void NcclGroup::abort_all() {
  for (auto& k : ranks_) {
    std::lock_guard<std::mutex> l(k->mu);
    if (k->aborted) continue;
    if (cudaSetDevice(k->device) != cudaSuccess) (void)cudaGetLastError();
    (void)ncclCommAbort(k->comm);  // its kernels see the abort flag and return
    k->aborted = true;
  }
}

std::string NcclGroup::late_ranks(long seq) {
  std::string not_issued, not_reached;
  for (int q = 0; q < size(); ++q) {
    const Rank& p = *ranks_[size_t(q)];
    const std::string who = "rank " + std::to_string(q) + " (CUDA device " + std::to_string(p.device) + ")";
    if (p.issued < seq) {
      append(not_issued, who);
      continue;
    }
    for (const InFlight& f : p.in_flight)
      if (f.seq == seq && !event_done(f.start, p.device)) append(not_reached, who);
  }
  std::string s;
  if (!not_issued.empty()) s = not_issued + " has not issued it (its thread failed, hangs or is far behind)";
  if (!not_reached.empty())
    s += (s.empty() ? "" : "; ") + not_reached + " issued it, but its stream has not reached it (work before it hangs)";
  if (s.empty()) s = "every rank issued it and its stream reached it, yet it has not completed (NCCL or a device hangs)";
  return s;
}

Status NcclGroup::check_in_flight(Clock::time_point now) {
  Status failure;
  for (int r = 0; r < size(); ++r) {
    auto& v = ranks_[size_t(r)]->in_flight;
    const int dev = ranks_[size_t(r)]->device;
    for (auto it = v.begin(); it != v.end();) {
      if (event_done(it->end, dev)) {
        destroy_events(it->start, it->end);
        it = v.erase(it);
        continue;
      }
      if (!it->started && event_done(it->start, dev)) it->started = now;
      const double ran = it->started ? std::chrono::duration<double>(now - *it->started).count() : 0;
      if (ran > opt_.timeout_seconds && failure.ok() && failed_.ok())
        failure = Status(StatusCode::kUnavailable, describe(r, it->seq, it->op) + " has waited " + seconds(ran) +
                                                       " s (comm_timeout_seconds " + seconds(opt_.timeout_seconds) +
                                                       "): " + late_ranks(it->seq) + "; the NCCL group was aborted");
      ++it;
    }
  }
  return failure;
}

Status NcclGroup::check_async_errors() {
  for (int r = 0; r < size(); ++r) {
    Rank& k = *ranks_[size_t(r)];
    ncclResult_t a = ncclSuccess;
    {
      std::lock_guard<std::mutex> l(k.mu);
      if (k.aborted || ncclCommGetAsyncError(k.comm, &a) != ncclSuccess) continue;
    }
    if (a != ncclSuccess && a != ncclInProgress)
      return Status(StatusCode::kUnavailable, "NCCL reports an asynchronous error on rank " + std::to_string(r) +
                                                  " (CUDA device " + std::to_string(k.device) +
                                                  "): " + ncclGetErrorString(a) + "; the NCCL group was aborted");
  }
  return Status::Ok();
}

void NcclGroup::watch() {
  const auto poll = std::chrono::duration<double>(std::clamp(opt_.timeout_seconds / 20, 0.001, 0.1));
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    cv_.wait_for(l, poll, [&] { return stop_; });
    if (stop_) break;
    Status f = check_in_flight(Clock::now());
    const bool healthy = failed_.ok();
    l.unlock();
    if (f.ok() && healthy) f = check_async_errors();
    if (!f.ok()) fail(f);
    l.lock();
  }
}

}  // namespace mt

// NcclGroup: what the NcclComms of one process share (nccl_comm.h) — one non-blocking NCCL
// communicator per rank, each rank's count of the collectives it has issued, the collectives in
// flight on each rank's stream (bracketed by two CUDA events), and the watchdog thread.
//
// The watchdog polls every in-flight collective (cudaEventQuery) and every communicator
// (ncclCommGetAsyncError). It fails the group when a collective has run longer than
// CommOptions::timeout_seconds since its stream reached it (the start event: work queued before
// it does not count), or when NCCL reports an asynchronous error. Failing the group records the
// reason (first failure wins; it names the ranks that had not issued the collective, or whose
// stream had not reached it), makes it the sticky error of every backend with a collective in
// flight (Backend::set_error: what the aborted collective wrote is suspect), then aborts every
// communicator (ncclCommAbort), so NCCL kernels waiting for a peer return and the streams drain.
// Every later collective of every rank returns the reason at once.
//
// A launch is itself bounded: a non-blocking communicator may return ncclInProgress (e.g. while
// it connects to its peers on first use), and issue() polls it against the same timeout.
//
// Threads: each rank's collectives come from one thread at a time (its replica's); the watchdog
// runs beside them. Every NCCL call on a communicator is made under that rank's mutex, and no
// call is made on one once it is aborted (NCCL's calls on one communicator are not thread-safe).
// Only nccl_comm.cc and this file's .cc include this header (built only with NCCL).
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/dist/communicator.h"

namespace mt {

Status nccl_status(ncclResult_t r, const std::string& what);

// One collective as the watchdog and the error messages describe it.
struct NcclOp {
  const char* name;  // "reduce", ...
  size_t n;          // elements
  CommType type;
  Backend* backend;  // whose stream it is enqueued on (gets the sticky error if it is aborted)
  cudaStream_t stream;
};

class NcclGroup {
 public:
  using Clock = std::chrono::steady_clock;
  // Takes the initialised communicators (rank r on devices[r]) and starts the watchdog.
  NcclGroup(std::vector<ncclComm_t> comms, std::vector<int> devices, const CommOptions& opt);
  // Stops the watchdog; destroys the communicators, or aborts them after a failure or while a
  // collective is still in flight (ncclCommDestroy would wait for it).
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  int size() const { return int(ranks_.size()); }
  int device(int rank) const { return ranks_[size_t(rank)]->device; }
  // Rank `rank`'s next collective: `launch` enqueues it with the rank's communicator on
  // op.stream. Returns once NCCL has enqueued it (ncclInProgress polled, within the timeout), or
  // the group's failure. The device of op.stream must be current on the calling thread.
  Status issue(int rank, const NcclOp& op, const std::function<ncclResult_t(ncclComm_t)>& launch);
  // Fails the group with `why` (see the header); later calls return it.
  void fail(const Status& why);
  Status failed() const;

 private:
  struct InFlight {
    long seq;  // the rank's seq-th collective (every rank issues the same sequence)
    NcclOp op;
    cudaEvent_t start, end;
    std::optional<Clock::time_point> started;  // when the watchdog first saw its stream reach it
  };
  struct Rank {
    ncclComm_t comm;
    int device;
    std::mutex mu;         // held for every NCCL call on comm
    bool aborted = false;  // under mu: comm is gone
    long issued = 0;       // under the group's mu_
    std::vector<InFlight> in_flight;  // under the group's mu_
  };

  // Waits out an ncclInProgress launch of `seq` on `rank`.
  Status finish_launch(int rank, long seq, const NcclOp& op, Clock::time_point since);
  void watch();
  // One round of the watchdog under mu_: drops completed collectives, returns the failure if
  // one has run too long.
  Status check_in_flight(Clock::time_point now);
  Status check_async_errors();
  // "rank 1 (CUDA device 1) has not issued it; ..." for the seq-th collective (under mu_).
  std::string late_ranks(long seq);
  std::string describe(int rank, long seq, const NcclOp& op) const;
  void abort_all();

  const CommOptions opt_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  Status failed_;
  std::thread watchdog_;  // last: started once everything above exists
};

}  // namespace mt

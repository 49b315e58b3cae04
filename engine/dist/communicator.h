// Communicator: the collectives data parallelism needs — all-reduce (sum), reduce, reduce-scatter,
// all-gather, broadcast — among the ranks of one group, over device or host buffers. It sits
// beside Backend (backend/backend.h): a collective is ordered with a backend's stream, so a
// gradient can be reduced as soon as the compute that produced it has run. Implementations:
//  * InProcessComm (in_process_comm.h): several devices of one process, a fixed reduction order
//    (rank 0 + rank 1 + ...), so a sum is bit-identical to the serial sum in rank order;
//  * MpiComm (mpi_comm.h): one rank per process (Open MPI), host buffers; builds only with MPI;
//  * NcclComm (nccl_comm.h): CUDA devices, enqueued on the backend's stream; builds only with NCCL.
// Every collective is bounded (CommOptions::timeout_seconds): a rank that died or hangs makes the
// others' collectives fail with an error that names it, never hang — a host-side wait by its
// deadline, a NCCL collective in flight by a watchdog that aborts it and sets the reason as the
// backend's sticky error (Backend::set_error).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/backend/backend.h"
#include "engine/base/status.h"

namespace mt {

enum class CommType { kF32, kF64 };
size_t comm_type_bytes(CommType t);
template <typename T>
constexpr CommType comm_type_of();
template <>
constexpr CommType comm_type_of<float>() { return CommType::kF32; }
template <>
constexpr CommType comm_type_of<double>() { return CommType::kF64; }

// Where a collective sits in a backend's work: after everything enqueued on `stream` before the
// call, and before anything enqueued there after the call returns. No backend: host buffers,
// ordered by the call itself. A host-side implementation waits for the stream (and fails, naming
// this rank, if the backend reports an error: its buffers are then suspect); NCCL enqueues on it.
struct CommOrder {
  Backend* backend = nullptr;
  StreamKind stream = StreamKind::kCompute;
};

struct CommOptions {
  // The longest any rank waits for the others inside one collective before it fails, naming the
  // ranks that did not arrive. It bounds how long a dead or hung rank can stall the rest.
  double timeout_seconds = 300;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string name() const = 0;  // "in-process", "mpi", "nccl"
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // buf[i] = the sum over ranks of their buf[i]; the same bits on every rank.
  virtual Status all_reduce(void* buf, size_t n, CommType t, const CommOrder& at) = 0;
  // root's buf[i] = the sum over ranks; the other ranks' buf is left as it was.
  virtual Status reduce(void* buf, size_t n, CommType t, int root, const CommOrder& at) = 0;
  // recv[i] (n elements) = the sum over ranks of their send[rank() * n + i] (send: size() * n).
  virtual Status reduce_scatter(const void* send, void* recv, size_t n, CommType t, const CommOrder& at) = 0;
  // recv[r * n + i] = rank r's send[i] (recv: size() * n elements).
  virtual Status all_gather(const void* send, void* recv, size_t n, CommType t, const CommOrder& at) = 0;
  // Every rank's buf = root's buf.
  virtual Status broadcast(void* buf, size_t n, CommType t, int root, const CommOrder& at) = 0;
  // This rank has failed (its device, its data): the others' current and later collectives fail
  // at once with `why`, naming this rank, instead of waiting out the timeout. Where the transport
  // cannot carry it (MPI), the process's exit does (mpirun ends the job).
  virtual void abort(const Status& why) { (void)why; }

  // Typed conveniences.
  template <typename T>
  Status all_reduce(T* buf, size_t n, const CommOrder& at = {}) { return all_reduce(buf, n, comm_type_of<T>(), at); }
  template <typename T>
  Status reduce(T* buf, size_t n, int root, const CommOrder& at = {}) { return reduce(buf, n, comm_type_of<T>(), root, at); }
  template <typename T>
  Status reduce_scatter(const T* send, T* recv, size_t n, const CommOrder& at = {}) {
    return reduce_scatter(send, recv, n, comm_type_of<T>(), at);
  }
  template <typename T>
  Status all_gather(const T* send, T* recv, size_t n, const CommOrder& at = {}) {
    return all_gather(send, recv, n, comm_type_of<T>(), at);
  }
  template <typename T>
  Status broadcast(T* buf, size_t n, int root, const CommOrder& at = {}) { return broadcast(buf, n, comm_type_of<T>(), root, at); }
};

// Host-side implementations' entry: waits until `at`'s stream has run what was enqueued on it;
// the backend's sticky error (naming `rank`) when it has failed.
Status wait_for_stream(const CommOrder& at, int rank);
// "root = 3 is not a rank of a group of 2" and the like.
Status check_root(int root, int size);

}  // namespace mt

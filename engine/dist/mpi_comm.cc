#include "engine/dist/mpi_comm.h"

#include <mpi.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace mt {

namespace {

constexpr int kArrivalTag = 7151;

Status mpi_error(int rc, const std::string& what) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return internal_error("MPI " + what + ": " + std::string(msg, size_t(len)));
}
#define MT_MPI(call, what) \
  do { if (int rc_ = (call); rc_ != MPI_SUCCESS) return mpi_error(rc_, what); } while (0)

MPI_Datatype mpi_type(CommType t) { return t == CommType::kF64 ? MPI_DOUBLE : MPI_FLOAT; }

Status init_mpi_once() {
  static std::once_flag once;
  static Status status;
  std::call_once(once, [] {
    int done = 0;
    MPI_Initialized(&done);
    int provided = 0;
    if (!done && MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      status = internal_error("MPI_Init_thread failed");
      return;
    }
    if (done) MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE)
      status = failed_precondition("this MPI library does not provide MPI_THREAD_MULTIPLE (the optimizer thread and "
                                   "the step loop run collectives at the same time)");
    // Errors come back as return codes (turned into Status), never as an abort inside MPI.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  });
  return status;
}

class MpiComm final : public Communicator {
 public:
  MpiComm(MPI_Comm data, MPI_Comm arrivals, const CommOptions& opt) : data_(data), arrivals_(arrivals), opt_(opt) {
    MPI_Comm_rank(data_, &rank_);
    MPI_Comm_size(data_, &size_);
  }
  ~MpiComm() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized || !clean_) return;  // a pending request would make MPI_Comm_free wait
    MPI_Comm_free(&data_);
    MPI_Comm_free(&arrivals_);
  }
  std::string name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status all_reduce(void* buf, size_t n, CommType t, const CommOrder& at) override {
    MT_RETURN_IF_ERROR(enter(at, "all_reduce", n));
    MPI_Request r;
    MT_MPI(MPI_Iallreduce(MPI_IN_PLACE, buf, int(n), mpi_type(t), MPI_SUM, data_, &r), "Iallreduce");
    return finish(&r, "all_reduce", n);
  }
  Status reduce(void* buf, size_t n, CommType t, int root, const CommOrder& at) override {
    MT_RETURN_IF_ERROR(check_root(root, size_));
    MT_RETURN_IF_ERROR(enter(at, "reduce", n));
    MPI_Request r;
    const void* send = rank_ == root ? MPI_IN_PLACE : buf;
    MT_MPI(MPI_Ireduce(send, rank_ == root ? buf : nullptr, int(n), mpi_type(t), MPI_SUM, root, data_, &r), "Ireduce");
    return finish(&r, "reduce", n);
  }
  Status reduce_scatter(const void* send, void* recv, size_t n, CommType t, const CommOrder& at) override {
    MT_RETURN_IF_ERROR(enter(at, "reduce_scatter", n));
    MPI_Request r;
    MT_MPI(MPI_Ireduce_scatter_block(send, recv, int(n), mpi_type(t), MPI_SUM, data_, &r), "Ireduce_scatter_block");
    return finish(&r, "reduce_scatter", n);
  }
  Status all_gather(const void* send, void* recv, size_t n, CommType t, const CommOrder& at) override {
    MT_RETURN_IF_ERROR(enter(at, "all_gather", n));
    MPI_Request r;
    MT_MPI(MPI_Iallgather(send, int(n), mpi_type(t), recv, int(n), mpi_type(t), data_, &r), "Iallgather");
    return finish(&r, "all_gather", n);
  }
  Status broadcast(void* buf, size_t n, CommType t, int root, const CommOrder& at) override {
    MT_RETURN_IF_ERROR(check_root(root, size_));
    MT_RETURN_IF_ERROR(enter(at, "broadcast", n));
    MPI_Request r;
    MT_MPI(MPI_Ibcast(buf, int(n), mpi_type(t), root, data_, &r), "Ibcast");
    return finish(&r, "broadcast", n);
  }

 private:
  // The stream has run; the element count fits MPI's int; every peer has reached this collective
  // (or the ones that have not are named).
  Status enter(const CommOrder& at, const char* what, size_t n) {
    if (!failed_.ok()) return failed_;
    if (at.backend && at.backend->name() != "cpu")
      return unimplemented(std::string("MPI ") + what + " of " + at.backend->name() + " device memory: use NCCL");
    MT_RETURN_IF_ERROR(wait_for_stream(at, rank_));
    if (n > size_t(INT32_MAX)) return invalid_argument("MPI " + std::string(what) + " of " + std::to_string(n) + " elements: over 2^31-1");
    ++seq_;
    std::vector<long long> got(size_t(size_), -1);
    std::vector<MPI_Request> reqs;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      reqs.emplace_back();
      MT_MPI(MPI_Irecv(&got[size_t(p)], 1, MPI_LONG_LONG, p, kArrivalTag, arrivals_, &reqs.back()), "Irecv");
      reqs.emplace_back();
      MT_MPI(MPI_Isend(&seq_, 1, MPI_LONG_LONG, p, kArrivalTag, arrivals_, &reqs.back()), "Isend");
    }
    if (poll(reqs.data(), int(reqs.size()))) {
      for (int p = 0; p < size_; ++p)
        if (p != rank_ && got[size_t(p)] != seq_)
          return fail("MPI collective #" + std::to_string(seq_) + " (" + what + ") on rank " + std::to_string(rank_) +
                      ": rank " + std::to_string(p) + " reached collective #" + std::to_string(got[size_t(p)]) +
                      " instead (the ranks disagree on the schedule)");
      return Status::Ok();
    }
    std::string late;
    for (int p = 0; p < size_; ++p)
      if (p != rank_ && got[size_t(p)] != seq_) late += (late.empty() ? "" : ", ") + std::to_string(p);
    if (late.empty())  // every peer's number came, but ours did not leave: a peer stopped receiving
      return fail("MPI " + std::string(what) + " of " + std::to_string(n) + " elements (collective #" +
                  std::to_string(seq_) + ", rank " + std::to_string(rank_) + "): " + others() +
                  " did not take its arrival within " + std::to_string(opt_.timeout_seconds) + " s: it died or hangs");
    return fail("MPI " + std::string(what) + " of " + std::to_string(n) + " elements (collective #" +
                std::to_string(seq_) + ", waited by rank " + std::to_string(rank_) + "): rank " + late +
                " did not arrive within " + std::to_string(opt_.timeout_seconds) + " s: it died or hangs");
  }
  Status finish(MPI_Request* r, const char* what, size_t n) {
    if (poll(r, 1)) return Status::Ok();
    return fail("MPI " + std::string(what) + " of " + std::to_string(n) + " elements (collective #" +
                std::to_string(seq_) + ", rank " + std::to_string(rank_) + "): " + others() +
                " did not complete it within " + std::to_string(opt_.timeout_seconds) +
                " s after every rank arrived: it died or hangs inside it");
  }
  // Who can be the culprit once every rank arrived: "rank 1", or "one of ranks 0, 2, 3".
  std::string others() const {
    std::string list;
    for (int p = 0; p < size_; ++p)
      if (p != rank_) list += (list.empty() ? "" : ", ") + std::to_string(p);
    return size_ == 2 ? "rank " + list : "one of ranks " + list;
  }
  // True when every request completed before the deadline.
  bool poll(MPI_Request* reqs, int count) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(opt_.timeout_seconds);
    for (int spins = 0;; ++spins) {
      int flag = 0;
      if (MPI_Testall(count, reqs, &flag, MPI_STATUSES_IGNORE) != MPI_SUCCESS) return false;
      if (flag) return true;
      if (std::chrono::steady_clock::now() > deadline) return false;
      if (spins > 1000) std::this_thread::yield();
    }
  }
  Status fail(std::string why) {
    clean_ = false;
    failed_ = Status(StatusCode::kUnavailable, std::move(why));
    return failed_;
  }

  MPI_Comm data_, arrivals_;
  CommOptions opt_;
  int rank_ = 0, size_ = 1;
  long long seq_ = 0;
  bool clean_ = true;  // no request left pending
  Status failed_;      // sticky: after a timeout the group is broken
};

}  // namespace

bool mpi_built() { return true; }

Result<std::unique_ptr<Communicator>> make_mpi_world_comm(const CommOptions& opt) {
  MT_RETURN_IF_ERROR(init_mpi_once());
  MPI_Comm data, arrivals;
  MT_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &data), "Comm_dup");
  MT_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &arrivals), "Comm_dup");
  MPI_Comm_set_errhandler(data, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(arrivals, MPI_ERRORS_RETURN);
  return std::unique_ptr<Communicator>(new MpiComm(data, arrivals, opt));
}

void mpi_finalize() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Finalize();
}

}  // namespace mt

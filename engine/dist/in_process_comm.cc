#include "engine/dist/in_process_comm.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace mt {

namespace {

enum class Op { kAllReduce, kReduce, kReduceScatter, kAllGather, kBroadcast };
const char* op_name(Op op) {
  switch (op) {
    case Op::kAllReduce: return "all_reduce";
    case Op::kReduce: return "reduce";
    case Op::kReduceScatter: return "reduce_scatter";
    case Op::kAllGather: return "all_gather";
    case Op::kBroadcast: return "broadcast";
  }
  return "?";
}

struct Posted {
  const void* send = nullptr;
  void* recv = nullptr;
};

// What every rank of a group shares.
class Group {
 public:
  Group(int size, const CommOptions& opt) : size_(size), opt_(opt), posted_(size_t(size)), phase_(size_t(size), 0) {}
  int size() const { return size_; }

  // Rank `rank` has arrived at its next barrier; returns once every rank has (or fails, naming
  // the ranks that did not arrive in time, or the rank that aborted).
  Status barrier(int rank, const char* what, size_t n) {
    std::unique_lock<std::mutex> l(mu_);
    const long mine = ++phase_[size_t(rank)];
    cv_.notify_all();
    const auto all_here = [&] {
      return !failed_.ok() || *std::min_element(phase_.begin(), phase_.end()) >= mine;
    };
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(opt_.timeout_seconds);
    if (!cv_.wait_until(l, deadline, all_here)) {
      std::string late;
      for (int r = 0; r < size_; ++r)
        if (phase_[size_t(r)] < mine) late += (late.empty() ? "" : ", ") + std::to_string(r);
      failed_ = Status(StatusCode::kUnavailable,
                       "in-process communicator: rank " + late + " did not reach " + what + " (" + std::to_string(n) +
                           " elements; waited by rank " + std::to_string(rank) + ") within " +
                           std::to_string(opt_.timeout_seconds) + " s: it failed or hangs");
      cv_.notify_all();
    }
    return failed_;
  }
  void abort(int rank, const Status& why) {
    std::lock_guard<std::mutex> l(mu_);
    if (failed_.ok()) failed_ = Status(why.code(), "rank " + std::to_string(rank) + " failed: " + why.message());
    cv_.notify_all();
  }
  Status failed() {
    std::lock_guard<std::mutex> l(mu_);
    return failed_;
  }
  std::vector<Posted>& posted() { return posted_; }  // written before a barrier, read after it

 private:
  const int size_;
  const CommOptions opt_;
  std::vector<Posted> posted_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<long> phase_;
  Status failed_;
};

// Elements [begin, end) of rank `r`'s share of n.
std::pair<size_t, size_t> share(size_t n, int r, int size) {
  return {n * size_t(r) / size_t(size), n * size_t(r + 1) / size_t(size)};
}

template <typename T>
T sum_in_rank_order(const std::vector<Posted>& p, size_t i, size_t offset) {
  T s = static_cast<const T*>(p[0].send)[offset + i];
  for (size_t r = 1; r < p.size(); ++r) s += static_cast<const T*>(p[r].send)[offset + i];
  return s;
}

class InProcessComm final : public Communicator {
 public:
  InProcessComm(std::shared_ptr<Group> g, int rank) : g_(std::move(g)), rank_(rank) {}
  std::string name() const override { return "in-process"; }
  int rank() const override { return rank_; }
  int size() const override { return g_->size(); }

  Status all_reduce(void* buf, size_t n, CommType t, const CommOrder& at) override {
    return run(Op::kAllReduce, buf, buf, n, t, 0, at);
  }
  Status reduce(void* buf, size_t n, CommType t, int root, const CommOrder& at) override {
    MT_RETURN_IF_ERROR(check_root(root, size()));
    return run(Op::kReduce, buf, buf, n, t, root, at);
  }
  Status reduce_scatter(const void* send, void* recv, size_t n, CommType t, const CommOrder& at) override {
    return run(Op::kReduceScatter, send, recv, n, t, 0, at);
  }
  Status all_gather(const void* send, void* recv, size_t n, CommType t, const CommOrder& at) override {
    return run(Op::kAllGather, send, recv, n, t, 0, at);
  }
  Status broadcast(void* buf, size_t n, CommType t, int root, const CommOrder& at) override {
    MT_RETURN_IF_ERROR(check_root(root, size()));
    return run(Op::kBroadcast, buf, buf, n, t, root, at);
  }
  void abort(const Status& why) override { g_->abort(rank_, why); }

 private:
  Status run(Op op, const void* send, void* recv, size_t n, CommType t, int root, const CommOrder& at) {
    if (at.backend && at.backend->name() != "cpu")  // the host reads every rank's buffers
      return unimplemented("the in-process communicator reads device memory from the host: " + at.backend->name() +
                           " devices need NCCL");
    if (Status s = wait_for_stream(at, rank_); !s.ok()) {
      g_->abort(rank_, s);
      return g_->failed();
    }
    g_->posted()[size_t(rank_)] = {send, recv};
    MT_RETURN_IF_ERROR(g_->barrier(rank_, op_name(op), n));  // every rank's buffers are posted
    if (t == CommType::kF64) work<double>(op, n, root);
    else work<float>(op, n, root);
    return g_->barrier(rank_, op_name(op), n);  // nobody reads a buffer any more
  }

  // This rank's part: for the reductions, its 1/N of the elements (summed in rank order into
  // the buffers that receive them); for the gathers and broadcast, its own receive buffer.
  template <typename T>
  void work(Op op, size_t n, int root) {
    const std::vector<Posted>& p = g_->posted();
    const int N = size();
    const auto [b, e] = share(n, rank_, N);
    switch (op) {
      case Op::kAllReduce:
        for (size_t i = b; i < e; ++i) {
          const T s = sum_in_rank_order<T>(p, i, 0);
          for (int r = 0; r < N; ++r) static_cast<T*>(p[size_t(r)].recv)[i] = s;
        }
        break;
      case Op::kReduce:
        for (size_t i = b; i < e; ++i) static_cast<T*>(p[size_t(root)].recv)[i] = sum_in_rank_order<T>(p, i, 0);
        break;
      case Op::kReduceScatter:
        for (size_t i = 0; i < n; ++i)
          static_cast<T*>(p[size_t(rank_)].recv)[i] = sum_in_rank_order<T>(p, i, size_t(rank_) * n);
        break;
      case Op::kAllGather:
        for (int r = 0; r < N; ++r) {
          T* dst = static_cast<T*>(p[size_t(rank_)].recv) + size_t(r) * n;
          if (dst != p[size_t(r)].send) std::copy_n(static_cast<const T*>(p[size_t(r)].send), n, dst);
        }
        break;
      case Op::kBroadcast:
        if (rank_ != root)  // copy_n: zero-length buffers may be null, which memcpy may not see
          std::copy_n(static_cast<const T*>(p[size_t(root)].send), n, static_cast<T*>(p[size_t(rank_)].recv));
        break;
    }
  }

  std::shared_ptr<Group> g_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_in_process_comms(int size, const CommOptions& opt) {
  auto g = std::make_shared<Group>(std::max(size, 1), opt);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < g->size(); ++r) comms.push_back(std::make_unique<InProcessComm>(g, r));
  return comms;
}

}  // namespace mt

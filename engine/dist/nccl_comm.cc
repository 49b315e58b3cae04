#include "engine/dist/nccl_comm.h"

#include <chrono>
#include <thread>

#include "engine/dist/nccl_group.h"

namespace mt {

namespace {

ncclDataType_t nccl_type(CommType t) { return t == CommType::kF64 ? ncclFloat64 : ncclFloat32; }

class NcclComm final : public Communicator {
 public:
  NcclComm(std::shared_ptr<NcclGroup> g, int rank) : g_(std::move(g)), rank_(rank) {}
  std::string name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return g_->size(); }

  Status all_reduce(void* buf, size_t n, CommType t, const CommOrder& at) override {
    return run("all_reduce", n, t, at, [=](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(buf, buf, n, nccl_type(t), ncclSum, c, s);
    });
  }
  Status reduce(void* buf, size_t n, CommType t, int root, const CommOrder& at) override {
    MT_RETURN_IF_ERROR(check_root(root, size()));
    return run("reduce", n, t, at, [=](ncclComm_t c, cudaStream_t s) {
      return ncclReduce(buf, buf, n, nccl_type(t), ncclSum, root, c, s);
    });
  }
  Status reduce_scatter(const void* send, void* recv, size_t n, CommType t, const CommOrder& at) override {
    return run("reduce_scatter", n, t, at, [=](ncclComm_t c, cudaStream_t s) {
      return ncclReduceScatter(send, recv, n, nccl_type(t), ncclSum, c, s);
    });
  }
  Status all_gather(const void* send, void* recv, size_t n, CommType t, const CommOrder& at) override {
    return run("all_gather", n, t, at, [=](ncclComm_t c, cudaStream_t s) {
      return ncclAllGather(send, recv, n, nccl_type(t), c, s);
    });
  }
  Status broadcast(void* buf, size_t n, CommType t, int root, const CommOrder& at) override {
    MT_RETURN_IF_ERROR(check_root(root, size()));
    return run("broadcast", n, t, at, [=](ncclComm_t c, cudaStream_t s) {
      return ncclBroadcast(buf, buf, n, nccl_type(t), root, c, s);
    });
  }
  void abort(const Status& why) override {
    g_->fail(Status(why.code(), "rank " + std::to_string(rank_) + " (CUDA device " + std::to_string(g_->device(rank_)) +
                                    ") failed: " + why.message()));
  }

 private:
  // A zero-length collective moves nothing: every rank returns at once (they all call it alike),
  // without a launch NCCL might refuse for its null buffers.
  template <typename Launch>
  Status run(const char* op, size_t n, CommType t, const CommOrder& at, Launch launch) {
    MT_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(at));
    if (n == 0) return g_->failed();
    return g_->issue(rank_, NcclOp{op, n, t, at.backend, s}, [&](ncclComm_t c) { return launch(c, s); });
  }

  // NCCL works on device memory, on the CUDA stream of this rank's device, current on the caller.
  Result<cudaStream_t> stream_of(const CommOrder& at) const {
    const int device = g_->device(rank_);
    if (!at.backend || at.backend->device_index() != device || !at.backend->native_stream(at.stream))
      return invalid_argument("NCCL rank " + std::to_string(rank_) + " needs the CUDA backend of device " +
                              std::to_string(device) + " in its CommOrder");
    int cur = -1;
    if ((cudaGetDevice(&cur) != cudaSuccess || cur != device) && cudaSetDevice(device) != cudaSuccess) {
      (void)cudaGetLastError();
      return internal_error("cudaSetDevice(" + std::to_string(device) + ") for NCCL rank " + std::to_string(rank_));
    }
    return static_cast<cudaStream_t>(at.backend->native_stream(at.stream));
  }

  std::shared_ptr<NcclGroup> g_;
  int rank_;
};

Status check_nccl_devices(const std::vector<int>& devices) {
  if (devices.empty()) return invalid_argument("NCCL: no devices");
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return failed_precondition(std::string("NCCL: no usable CUDA device (") + cudaGetErrorString(e) + ")");
  }
  for (size_t r = 0; r < devices.size(); ++r) {
    if (devices[r] < 0 || devices[r] >= count)
      return invalid_argument("NCCL: CUDA device " + std::to_string(devices[r]) + " does not exist (" +
                              std::to_string(count) + " device(s))");
    for (size_t q = 0; q < r; ++q)  // NCCL does not support one device as two ranks
      if (devices[q] == devices[r]) return invalid_argument("NCCL: CUDA device " + std::to_string(devices[r]) + " given twice");
  }
  return Status::Ok();
}

// Polls the non-blocking initialisation of `comms` until every one is ready, one fails, or the
// timeout passes.
Status await_init(const std::vector<ncclComm_t>& comms, double timeout_seconds) {
  const auto since = std::chrono::steady_clock::now();
  for (;;) {
    bool pending = false;
    for (size_t r = 0; r < comms.size(); ++r) {
      ncclResult_t state = ncclInProgress;
      const ncclResult_t q = ncclCommGetAsyncError(comms[r], &state);
      if (q != ncclSuccess) state = q;
      if (state == ncclInProgress) pending = true;
      else if (state != ncclSuccess) return nccl_status(state, "initialising rank " + std::to_string(r));
    }
    if (!pending) return Status::Ok();
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count() > timeout_seconds)
      return Status(StatusCode::kUnavailable, "NCCL: the communicators were not initialised within " +
                                                  std::to_string(timeout_seconds) + " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Every rank's communicator, from this one thread: non-blocking (so that a hang can be aborted),
// initialised in one NCCL group (ncclCommInitAll's equivalent, with a config).
Result<std::vector<ncclComm_t>> init_comms(const std::vector<int>& devices, const CommOptions& opt) {
  ncclUniqueId id;
  MT_RETURN_IF_ERROR(nccl_status(ncclGetUniqueId(&id), "GetUniqueId"));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const int n = int(devices.size());
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  Status s = nccl_status(ncclGroupStart(), "GroupStart");
  for (int r = 0; s.ok() && r < n; ++r) {
    if (cudaSetDevice(devices[size_t(r)]) != cudaSuccess) {
      (void)cudaGetLastError();
      s = internal_error("cudaSetDevice(" + std::to_string(devices[size_t(r)]) + ")");
      break;
    }
    const ncclResult_t q = ncclCommInitRankConfig(&comms[size_t(r)], n, id, r, &config);
    if (q != ncclSuccess && q != ncclInProgress) s = nccl_status(q, "CommInitRankConfig(rank " + std::to_string(r) + ")");
  }
  const ncclResult_t end = ncclGroupEnd();
  if (s.ok() && end != ncclSuccess && end != ncclInProgress) s = nccl_status(end, "GroupEnd (initialisation)");
  if (s.ok()) s = await_init(comms, opt.timeout_seconds);
  if (s.ok()) return comms;
  for (ncclComm_t c : comms)
    if (c) (void)ncclCommAbort(c);
  return s;
}

}  // namespace

bool nccl_built() { return true; }

Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_comms(const std::vector<int>& devices,
                                                                   const CommOptions& opt) {
  MT_RETURN_IF_ERROR(check_nccl_devices(devices));
  int prev = 0;
  const bool had = cudaGetDevice(&prev) == cudaSuccess;
  auto raw = init_comms(devices, opt);
  if (had) (void)cudaSetDevice(prev);  // the caller's device, as it was
  if (!raw.ok()) return raw.status();
  auto group = std::make_shared<NcclGroup>(std::move(raw).value(), devices, opt);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < group->size(); ++r) comms.push_back(std::make_unique<NcclComm>(group, r));
  return comms;
}

}  // namespace mt

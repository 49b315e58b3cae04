#include "engine/dist/nccl_comm.h"

#include <cuda_runtime.h>
#include <nccl.h>

namespace mt {

namespace {

Status nccl_status(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return Status::Ok();
  return internal_error(std::string("NCCL ") + what + ": " + ncclGetErrorString(r));
}

ncclDataType_t nccl_type(CommType t) { return t == CommType::kF64 ? ncclFloat64 : ncclFloat32; }

class NcclComm final : public Communicator {
 public:
  NcclComm(ncclComm_t c, int rank, int size, int device) : comm_(c), rank_(rank), size_(size), device_(device) {}
  ~NcclComm() override { ncclCommDestroy(comm_); }
  std::string name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status all_reduce(void* buf, size_t n, CommType t, const CommOrder& at) override {
    MT_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(at));
    return nccl_status(ncclAllReduce(buf, buf, n, nccl_type(t), ncclSum, comm_, s), "all_reduce");
  }
  Status reduce(void* buf, size_t n, CommType t, int root, const CommOrder& at) override {
    MT_RETURN_IF_ERROR(check_root(root, size_));
    MT_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(at));
    return nccl_status(ncclReduce(buf, buf, n, nccl_type(t), ncclSum, root, comm_, s), "reduce");
  }
  Status reduce_scatter(const void* send, void* recv, size_t n, CommType t, const CommOrder& at) override {
    MT_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(at));
    return nccl_status(ncclReduceScatter(send, recv, n, nccl_type(t), ncclSum, comm_, s), "reduce_scatter");
  }
  Status all_gather(const void* send, void* recv, size_t n, CommType t, const CommOrder& at) override {
    MT_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(at));
    return nccl_status(ncclAllGather(send, recv, n, nccl_type(t), comm_, s), "all_gather");
  }
  Status broadcast(void* buf, size_t n, CommType t, int root, const CommOrder& at) override {
    MT_RETURN_IF_ERROR(check_root(root, size_));
    MT_ASSIGN_OR_RETURN(cudaStream_t s, stream_of(at));
    return nccl_status(ncclBroadcast(buf, buf, n, nccl_type(t), root, comm_, s), "broadcast");
  }
  void abort(const Status&) override { (void)ncclCommAbort(comm_); }

 private:
  // NCCL works on device memory, on the CUDA stream of this rank's device.
  Result<cudaStream_t> stream_of(const CommOrder& at) {
    if (!at.backend || at.backend->device_index() != device_ || !at.backend->native_stream(at.stream))
      return invalid_argument("NCCL rank " + std::to_string(rank_) + " needs the CUDA backend of device " +
                              std::to_string(device_) + " in its CommOrder");
    if (cudaSetDevice(device_) != cudaSuccess) return internal_error("cudaSetDevice(" + std::to_string(device_) + ")");
    return static_cast<cudaStream_t>(at.backend->native_stream(at.stream));
  }

  ncclComm_t comm_;
  int rank_, size_, device_;
};

}  // namespace

bool nccl_built() { return true; }
Status nccl_group_start() { return nccl_status(ncclGroupStart(), "GroupStart"); }
Status nccl_group_end() { return nccl_status(ncclGroupEnd(), "GroupEnd"); }

Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_comms(const std::vector<int>& devices) {
  if (devices.empty()) return invalid_argument("NCCL: no devices");
  std::vector<ncclComm_t> raw(devices.size());
  MT_RETURN_IF_ERROR(nccl_status(ncclCommInitAll(raw.data(), int(devices.size()), devices.data()), "CommInitAll"));
  std::vector<std::unique_ptr<Communicator>> comms;
  for (size_t r = 0; r < raw.size(); ++r)
    comms.push_back(std::make_unique<NcclComm>(raw[r], int(r), int(raw.size()), devices[r]));
  return comms;
}

}  // namespace mt

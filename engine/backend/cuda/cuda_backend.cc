// CudaBackend: see cuda_backend.h. Copies are timed with CUDA timing events around each
// transfer; take_copy_stats() sums the pairs that have completed (the rest carry over).
#include "engine/backend/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <chrono>
#include <deque>
#include <mutex>

#include "engine/backend/cuda/cuda_errors.h"
#include "engine/backend/cuda/cuda_ops.h"
#include "engine/backend/cuda/pinned_allocator.h"
#include "kernels/cuda/util.cuh"

namespace mt {

namespace {

class CudaEvent final : public Event {
 public:
  explicit CudaEvent(cudaEvent_t e) : e_(e) {}
  ~CudaEvent() override { cudaEventDestroy(e_); }
  bool done() const override { return cudaEventQuery(e_) != cudaErrorNotReady; }  // errors count as done
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_;
};

struct TimedCopy {
  cudaEvent_t start, end;
  size_t bytes;
};

class CudaBackend final : public Backend {
 public:
  static Result<std::unique_ptr<Backend>> create(const CudaBackendOptions& o);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  HostAllocator& host_allocator() override { return pinned_; }
  Status reserve_device(size_t bytes) override;
  Result<void*> device_alloc(size_t bytes) override;
  size_t device_capacity() const override { return arena_.capacity(); }
  size_t device_peak() const override { return arena_.used(); }
  void copy_h2d(void* dst, const void* src, size_t bytes) override;
  void copy_d2h(void* dst, const void* src, size_t bytes) override;
  void copy_d2h_bf16(bf16* dst, const float* src, size_t n) override;
  EventPtr record(StreamKind s) override;
  void stream_wait(StreamKind s, const EventPtr& e) override;
  double host_wait(const EventPtr& e) override;
  double elapsed(const EventPtr& from, const EventPtr& to) override;
  const Ops<float>& ops() override { return *ops_; }
  CopyStats take_copy_stats() override;
  Status error() const override { return errors_.get(); }

 private:
  explicit CudaBackend(const CudaBackendOptions& o) : opt_(o) {}
  Status init();
  void bind() const {
    if (opt_.device != 0) cudaSetDevice(opt_.device);  // the runtime's current device is per thread
  }
  cudaStream_t stream(StreamKind s) const { return streams_[int(s)]; }
  // Runs `issue` on `s` between two timing events kept for the copy statistics.
  template <typename F>
  void timed(StreamKind s, size_t bytes, F issue);

  CudaBackendOptions opt_;
  CudaErrors errors_;
  PinnedAllocator pinned_;
  cudaStream_t streams_[3] = {nullptr, nullptr, nullptr};
  std::unique_ptr<cuda::GemmContext> gemm_;
  std::unique_ptr<CudaOps> ops_;
  __nv_bfloat16* staging_ = nullptr;
  char* memory_ = nullptr;  // one cudaMalloc; arena_ hands out regions inside it
  DeviceArena arena_;
  std::mutex stats_mu_;
  std::deque<TimedCopy> pending_[3];
};

#define MT_CUDA_STATUS(expr)                                                                   \
  do {                                                                                         \
    const cudaError_t mt_e_ = (expr);                                                          \
    if (mt_e_ != cudaSuccess) return internal_error(cuda::describe(cuda::check_cuda(mt_e_, #expr))); \
  } while (0)

Result<std::unique_ptr<Backend>> CudaBackend::create(const CudaBackendOptions& o) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    return failed_precondition("backend = cuda: no usable CUDA device (" +
                               std::string(e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") + ")");
  if (o.device < 0 || o.device >= count)
    return invalid_argument("cuda device " + std::to_string(o.device) + " does not exist (" + std::to_string(count) +
                            " device(s))");
  std::unique_ptr<CudaBackend> b(new CudaBackend(o));
  MT_RETURN_IF_ERROR(b->init());
  return std::unique_ptr<Backend>(std::move(b));
}

Status CudaBackend::init() {
  MT_CUDA_STATUS(cudaSetDevice(opt_.device));
  for (auto& s : streams_) MT_CUDA_STATUS(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const cuda::CudaStatus g = cuda::GemmContext::create(gemm_, opt_.gemm_workspace_bytes);
  if (!g.ok()) return internal_error(cuda::describe(g));
  MT_CUDA_STATUS(cudaMalloc(reinterpret_cast<void**>(&staging_), opt_.bf16_staging_elems * sizeof(__nv_bfloat16)));
  ops_ = std::make_unique<CudaOps>(stream(StreamKind::kCompute), *gemm_, errors_);
  return Status::Ok();
}

CudaBackend::~CudaBackend() {
  bind();
  for (auto s : streams_)
    if (s) cudaStreamSynchronize(s);
  ops_.reset();
  for (auto s : streams_)
    if (s) cudaStreamSynchronize(s);
  for (auto& q : pending_)
    for (auto& t : q) cudaEventDestroy(t.start), cudaEventDestroy(t.end);
  gemm_.reset();
  if (staging_) cudaFree(staging_);
  if (memory_) cudaFree(memory_);
  for (auto s : streams_)
    if (s) cudaStreamDestroy(s);
}

Status CudaBackend::reserve_device(size_t bytes) {
  if (memory_) return failed_precondition("device arena already reserved");
  bind();
  const cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&memory_), bytes ? bytes : 256);
  if (e != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    memory_ = nullptr;
    return resource_exhausted("cannot reserve a device arena of " + std::to_string(bytes) + " bytes (cudaMalloc: " +
                              cudaGetErrorString(e) + "; " + std::to_string(free_b) + " of " +
                              std::to_string(total_b) + " bytes free)");
  }
  arena_.reset(memory_, bytes);
  return Status::Ok();
}

Result<void*> CudaBackend::device_alloc(size_t bytes) { return arena_.alloc(bytes); }

template <typename F>
void CudaBackend::timed(StreamKind s, size_t bytes, F issue) {
  bind();
  TimedCopy t{nullptr, nullptr, bytes};
  if (!errors_.note(cudaEventCreate(&t.start), "cudaEventCreate")) return;
  if (!errors_.note(cudaEventCreate(&t.end), "cudaEventCreate")) return;
  errors_.note(cudaEventRecord(t.start, stream(s)), "cudaEventRecord");
  issue();
  errors_.note(cudaEventRecord(t.end, stream(s)), "cudaEventRecord");
  std::lock_guard<std::mutex> l(stats_mu_);
  pending_[int(s)].push_back(t);
}

void CudaBackend::copy_h2d(void* dst, const void* src, size_t bytes) {
  timed(StreamKind::kH2D, bytes, [&] {
    errors_.note(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream(StreamKind::kH2D)),
                 "cudaMemcpyAsync(H2D)");
  });
}

void CudaBackend::copy_d2h(void* dst, const void* src, size_t bytes) {
  timed(StreamKind::kD2H, bytes, [&] {
    errors_.note(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream(StreamKind::kD2H)),
                 "cudaMemcpyAsync(D2H)");
  });
}

// Converts chunk by chunk into the device staging buffer on the D2H stream, then copies; the
// stream orders each chunk's reuse of the staging buffer after the previous copy.
void CudaBackend::copy_d2h_bf16(bf16* dst, const float* src, size_t n) {
  const cudaStream_t s = stream(StreamKind::kD2H);
  timed(StreamKind::kD2H, n * sizeof(bf16), [&] {
    for (size_t i = 0; i < n; i += opt_.bf16_staging_elems) {
      const size_t len = std::min(opt_.bf16_staging_elems, n - i);
      if (!errors_.note(cuda::convert_f32_to_bf16(staging_, src + i, len, s), "copy_d2h_bf16")) return;
      if (!errors_.note(cudaMemcpyAsync(dst + i, staging_, len * sizeof(bf16), cudaMemcpyDeviceToHost, s),
                        "cudaMemcpyAsync(D2H bf16)"))
        return;
    }
  });
}

EventPtr CudaBackend::record(StreamKind s) {
  bind();
  cudaEvent_t e = nullptr;
  // Timing enabled: elapsed() measures the streams by their own clock.
  if (!errors_.note(cudaEventCreateWithFlags(&e, cudaEventDefault), "cudaEventCreateWithFlags")) {
    // An event that reads as done (cudaEventQuery on a null event fails): nothing waits forever.
    return std::make_shared<CudaEvent>(nullptr);
  }
  errors_.note(cudaEventRecord(e, stream(s)), "cudaEventRecord");
  return std::make_shared<CudaEvent>(e);
}

void CudaBackend::stream_wait(StreamKind s, const EventPtr& e) {
  if (!e) return;
  const auto* ce = static_cast<const CudaEvent*>(e.get());
  if (!ce->get()) return;
  bind();
  errors_.note(cudaStreamWaitEvent(stream(s), ce->get(), 0), "cudaStreamWaitEvent");
}

double CudaBackend::host_wait(const EventPtr& e) {
  if (!e) return 0;
  const auto* ce = static_cast<const CudaEvent*>(e.get());
  if (!ce->get() || e->done()) return 0;
  bind();
  const auto t0 = std::chrono::steady_clock::now();
  errors_.note(cudaEventSynchronize(ce->get()), "cudaEventSynchronize");
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double CudaBackend::elapsed(const EventPtr& from, const EventPtr& to) {
  if (!from || !to) return 0;
  const auto* a = static_cast<const CudaEvent*>(from.get());
  const auto* b = static_cast<const CudaEvent*>(to.get());
  if (!a->get() || !b->get()) return 0;
  bind();
  float ms = 0;
  if (cudaEventElapsedTime(&ms, a->get(), b->get()) != cudaSuccess) {
    cudaGetLastError();  // a timing query that fails (e.g. not ready) is no device fault
    return 0;
  }
  return double(ms) * 1e-3;
}

CopyStats CudaBackend::take_copy_stats() {
  bind();
  CopyStats st;
  std::lock_guard<std::mutex> l(stats_mu_);
  for (int k : {int(StreamKind::kH2D), int(StreamKind::kD2H)}) {
    auto& q = pending_[k];
    while (!q.empty() && cudaEventQuery(q.front().end) == cudaSuccess) {
      float ms = 0;
      cudaEventElapsedTime(&ms, q.front().start, q.front().end);
      (k == int(StreamKind::kH2D) ? st.h2d_bytes : st.d2h_bytes) += q.front().bytes;
      (k == int(StreamKind::kH2D) ? st.h2d_seconds : st.d2h_seconds) += double(ms) * 1e-3;
      cudaEventDestroy(q.front().start);
      cudaEventDestroy(q.front().end);
      q.pop_front();
    }
  }
  return st;
}

}  // namespace

bool cuda_available() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) cudaGetLastError();
  return e == cudaSuccess && count > 0;
}

std::string cuda_describe() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("CUDA: no usable device (") + cudaGetErrorString(e) + ")";
  }
  if (count == 0) return "CUDA: 0 devices";
  cudaDeviceProp p{};
  cudaGetDeviceProperties(&p, 0);
  return "CUDA: " + std::to_string(count) + " device(s), device 0 " + p.name + " (sm_" + std::to_string(p.major) +
         std::to_string(p.minor) + ", " + std::to_string(p.totalGlobalMem >> 20) + " MiB)";
}

uint64_t cuda_device_memory() {
  if (!cuda_available()) return 0;
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return uint64_t(p.totalGlobalMem);
}

Result<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& opt) { return CudaBackend::create(opt); }

}  // namespace mt

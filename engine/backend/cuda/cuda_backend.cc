// CudaBackend: see cuda_backend.h. Copies are timed with CUDA timing events around each
// transfer; take_copy_stats() sums the pairs that have completed (the rest carry over).
//
// Threads: the uploader, the compute thread and the optimizer all call in. Every entry point
// binds the device first (bind_device: the current device is per host thread). Each copy stream
// is enqueued under its own mutex (see timed()), so one copy's timing pair brackets that copy only.
#include "engine/backend/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <chrono>
#include <deque>
#include <mutex>

#include "engine/backend/cuda/cuda_errors.h"
#include "engine/backend/cuda/cuda_ops.h"
#include "engine/backend/cuda/pinned_allocator.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_cudnn.cuh"
#include "kernels/cuda/util.cuh"

namespace mt {

namespace {
bool cudnn_attention_selected() { return cuda::attention_kernel() == cuda::AttentionKernel::kCudnn; }

class CudaEvent final : public Event {
 public:
  CudaEvent(cudaEvent_t e, int device, CudaErrors* errors) : e_(e), device_(device), errors_(errors) {}
  ~CudaEvent() override {
    if (e_) cudaEventDestroy(e_);
  }
  // A failed query counts as done (nothing waits forever on a lost device) and is recorded, so
  // Backend::error() says why before anything uses what the event guarded. "Not ready" is not an
  // error, but clear it from the thread's last error all the same: the next kernel launch on
  // this thread must not report it (launched()).
  bool done() const override {
    if (!e_) return true;
    bind_device(device_, errors_);
    const cudaError_t r = cudaEventQuery(e_);
    if (r == cudaErrorNotReady) {
      cuda::clear_last_error();
      return false;
    }
    if (r != cudaSuccess) errors_->note(r, "cudaEventQuery");
    return true;
  }
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_;
  int device_;
  CudaErrors* errors_;
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
  Status supports_head_dim(int head_dim) const override { return cuda_supports_head_dim(head_dim); }
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
  const Ops<float>& ops_fp32() override { return *ops_fp32_; }
  const Ops<bf16>& ops_bf16() override { return *ops_bf16_; }
  CopyStats take_copy_stats() override;
  Status error() const override { return errors_.get(); }
  void set_error(const Status& why) override { errors_.note(why); }
  int device_index() const override { return opt_.device; }
  void* native_stream(StreamKind s) override { return stream(s); }

 private:
  explicit CudaBackend(const CudaBackendOptions& o) : opt_(o), pinned_(o.device) {}
  Status init();
  bool bind() { return bind_device(opt_.device, &errors_); }
  cudaStream_t stream(StreamKind s) const { return streams_[int(s)]; }
  // Runs `issue` on `s` between two timing events kept for the copy statistics, holding the
  // stream's mutex (see the definition).
  template <typename F>
  void timed(StreamKind s, size_t bytes, F issue);

  CudaBackendOptions opt_;
  CudaErrors errors_;
  PinnedAllocator pinned_;
  cudaStream_t streams_[3] = {nullptr, nullptr, nullptr};
  std::unique_ptr<cuda::GemmContext> gemm_;
  void* attention_workspace_ = nullptr;
  std::unique_ptr<cuda::CudnnAttention> cudnn_;  // when the attention kernel is cuDNN
  std::unique_ptr<CudaOpContext> op_ctx_;  // shared by the two op tables
  std::unique_ptr<CudaOps<float>> ops_fp32_;
  std::unique_ptr<CudaOps<bf16>> ops_bf16_;
  __nv_bfloat16* staging_ = nullptr;
  char* memory_ = nullptr;  // one cudaMalloc; arena_ hands out regions inside it
  DeviceArena arena_;
  std::mutex stats_mu_;
  std::deque<TimedCopy> pending_[3];
  // One per stream: held while enqueueing on it (a timed copy, a stream wait, an event record).
  std::mutex stream_mu_[3];
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

// The device schedule flag: BlockingSync. A host thread that waits for the device
// (cudaEventSynchronize in host_wait, the optimizer waiting for a gradient's D2H copy, the
// compute thread waiting for a free slot) sleeps on an OS primitive instead of spinning. With
// the default (Auto: spin while contexts <= cores) every waiting thread burns a core, and the
// cores it burns are the AdamW thread pool's: the optimizer step runs on the host in parallel
// with the GPU, so a spinning waiter directly slows it. The price is wake-up latency (tens of
// microseconds) per host wait, against layer steps of milliseconds. See docs/ARCHITECTURE.md.
// The flag belongs to the device's primary context. Current runtimes overwrite the flags of an
// active context; older ones refuse (cudaErrorSetOnActiveProcess) once something in the process
// has created it. A refusal is not fatal: the flag is a scheduling choice, the context keeps its
// flags and the backend works anyway.
Status CudaBackend::init() {
  MT_CUDA_STATUS(cudaSetDevice(opt_.device));
  if (cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync) != cudaSuccess) cuda::clear_last_error();
  for (auto& s : streams_) MT_CUDA_STATUS(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const cuda::CudaStatus g = cuda::GemmContext::create(gemm_, opt_.gemm_workspace_bytes);
  if (!g.ok()) return internal_error(cuda::describe(g));
  MT_CUDA_STATUS(cudaMalloc(reinterpret_cast<void**>(&staging_), opt_.bf16_staging_elems * sizeof(__nv_bfloat16)));
  op_ctx_ = std::make_unique<CudaOpContext>(stream(StreamKind::kCompute), opt_.device, *gemm_, errors_);
  if (cudnn_attention_selected() && cuda::cudnn_built()) {  // else cuda_attention_warning() says why not
    if (opt_.attention_workspace_bytes) MT_CUDA_STATUS(cudaMalloc(&attention_workspace_, opt_.attention_workspace_bytes));
    const cuda::CudaStatus c = cuda::CudnnAttention::create(cudnn_, attention_workspace_, opt_.attention_workspace_bytes);
    if (!c.ok()) return failed_precondition("MEGATRAIN_ATTENTION=cudnn: " + cuda::describe(c));
    op_ctx_->set_cudnn(cudnn_.get());
  }
  ops_fp32_ = std::make_unique<CudaOps<float>>(*op_ctx_);
  ops_bf16_ = std::make_unique<CudaOps<bf16>>(*op_ctx_);
  return Status::Ok();
}

CudaBackend::~CudaBackend() {
  bind_device(opt_.device, nullptr);
  for (auto s : streams_)
    if (s) cudaStreamSynchronize(s);
  ops_fp32_.reset();
  ops_bf16_.reset();
  op_ctx_.reset();  // frees the op scratch on the compute stream
  for (auto s : streams_)
    if (s) cudaStreamSynchronize(s);
  for (auto& q : pending_)
    for (auto& t : q) cudaEventDestroy(t.start), cudaEventDestroy(t.end);
  gemm_.reset();
  cudnn_.reset();
  if (attention_workspace_) cudaFree(attention_workspace_);
  if (staging_) cudaFree(staging_);
  if (memory_) cudaFree(memory_);
  for (auto s : streams_)
    if (s) cudaStreamDestroy(s);
}

Status CudaBackend::reserve_device(size_t bytes) {
  if (memory_) return failed_precondition("device arena already reserved");
  if (!bind()) return errors_.get();
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

// Why the stream mutex: the uploader and the compute thread both enqueue on the H2D stream (and
// the optimizer and the compute thread on D2H). Unserialised, thread A could record its start
// event, thread B record its start and issue its copy, then A issue its copy and record its end:
// A's pair would bracket both copies and h2d_seconds count B's transfer twice. A stream wait
// slipped in by another thread between start and copy would likewise count wait as copy time.
// Holding the stream's mutex from the start event to the end event (and in stream_wait and
// record) makes each pair bracket exactly its own copy; copies on one stream run one after the
// other on the GPU anyway, so the lock costs only host enqueue time (microseconds).
template <typename F>
void CudaBackend::timed(StreamKind s, size_t bytes, F issue) {
  if (!bind()) return;
  TimedCopy t{nullptr, nullptr, bytes};
  if (!errors_.note(cudaEventCreate(&t.start), "cudaEventCreate")) return;
  if (!errors_.note(cudaEventCreate(&t.end), "cudaEventCreate")) {
    cudaEventDestroy(t.start);
    return;
  }
  {
    std::lock_guard<std::mutex> l(stream_mu_[int(s)]);
    errors_.note(cudaEventRecord(t.start, stream(s)), "cudaEventRecord");
    issue();
    errors_.note(cudaEventRecord(t.end, stream(s)), "cudaEventRecord");
  }
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
  cudaEvent_t e = nullptr;
  // Timing enabled: elapsed() measures the streams by their own clock.
  if (!bind() || !errors_.note(cudaEventCreateWithFlags(&e, cudaEventDefault), "cudaEventCreateWithFlags")) {
    // An event that reads as done (a null event): nothing waits forever; error() says why.
    return std::make_shared<CudaEvent>(nullptr, opt_.device, &errors_);
  }
  {
    std::lock_guard<std::mutex> l(stream_mu_[int(s)]);
    errors_.note(cudaEventRecord(e, stream(s)), "cudaEventRecord");
  }
  return std::make_shared<CudaEvent>(e, opt_.device, &errors_);
}

void CudaBackend::stream_wait(StreamKind s, const EventPtr& e) {
  if (!e) return;
  const auto* ce = static_cast<const CudaEvent*>(e.get());
  if (!ce->get()) return;
  if (!bind()) return;
  std::lock_guard<std::mutex> l(stream_mu_[int(s)]);
  errors_.note(cudaStreamWaitEvent(stream(s), ce->get(), 0), "cudaStreamWaitEvent");
}

// A failed wait (a fault on the stream) returns at once like a completed one; the failure is in
// error() before this returns, so a caller that checks error() after host_wait never uses the
// memory the event guarded (the optimizer must not run AdamW on gradients a failed copy left).
double CudaBackend::host_wait(const EventPtr& e) {
  if (!e) return 0;
  const auto* ce = static_cast<const CudaEvent*>(e.get());
  if (!ce->get() || e->done()) return 0;
  if (!bind()) return 0;
  const auto t0 = std::chrono::steady_clock::now();
  errors_.note(cudaEventSynchronize(ce->get()), "cudaEventSynchronize");
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double CudaBackend::elapsed(const EventPtr& from, const EventPtr& to) {
  if (!from || !to) return 0;
  const auto* a = static_cast<const CudaEvent*>(from.get());
  const auto* b = static_cast<const CudaEvent*>(to.get());
  if (!a->get() || !b->get()) return 0;
  if (!bind()) return 0;
  float ms = 0;
  if (cudaEventElapsedTime(&ms, a->get(), b->get()) != cudaSuccess) {
    cudaGetLastError();  // a timing query that fails (e.g. not ready) is no device fault
    return 0;
  }
  return double(ms) * 1e-3;
}

CopyStats CudaBackend::take_copy_stats() {
  CopyStats st;
  if (!bind()) return st;
  std::lock_guard<std::mutex> l(stats_mu_);
  for (int k : {int(StreamKind::kH2D), int(StreamKind::kD2H)}) {
    auto& q = pending_[k];
    while (!q.empty()) {
      const cudaError_t r = cudaEventQuery(q.front().end);
      if (r == cudaErrorNotReady) {
        cuda::clear_last_error();  // not an error; must not surface at the next launch
        break;
      }
      if (!errors_.note(r, "cudaEventQuery(copy timing)")) break;
      float ms = 0;
      errors_.note(cudaEventElapsedTime(&ms, q.front().start, q.front().end), "cudaEventElapsedTime");
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

uint64_t cuda_attention_workspace_bytes(int rows, int seq_len, int heads, int kv_heads, int head_dim) {
  // 0 from the stub too: a build without cuDNN reserves nothing.
  return cudnn_attention_selected()
             ? cuda::cudnn_attention_workspace_bytes(rows, seq_len, heads, kv_heads, head_dim)
             : 0;
}

std::string cuda_attention_warning() {
  if (!cudnn_attention_selected() || cuda::cudnn_built()) return "";
  return "MEGATRAIN_ATTENTION=cudnn, but " + cuda::cudnn_describe() + ": attention runs on our own kernel (simt)";
}

std::string cuda_attention_kernel_name() { return cuda::attention_kernel_name(cuda::attention_kernel()); }
std::string cuda_cudnn_describe() { return cuda::cudnn_describe(); }
uint64_t cuda_cudnn_attention_calls() { return cuda::cudnn_attention_calls(); }
CudnnBuildTotals cuda_cudnn_graph_builds() {
  const cuda::CudnnGraphBuilds b = cuda::cudnn_graph_builds();
  return {b.count, b.seconds};
}

uint64_t cuda_free_device_memory() {
  if (!cuda_available() || cudaSetDevice(0) != cudaSuccess) return 0;
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return uint64_t(free_b);
}

Result<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& opt) { return CudaBackend::create(opt); }

}  // namespace mt

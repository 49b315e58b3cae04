// The CUDA runtime API our kernels, their tests and engine/backend/cuda call, for the emulation:
// one device (an H100-like description), device memory is host memory (its use counted, so
// cudaMemGetInfo answers as a device would; a copy or fill whose pointers are not on the side
// its kind names is refused, as the device would fault). Copies, fills and kernels are queued on
// their streams and run when the host waits for them (streams.h), events time when their record
// runs; a copy from or to pageable host memory synchronises as CUDA's does.
#include <cublas_api.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "tests/cuda_emu/cuda_emu.h"
#include "tests/cuda_emu/streams.h"

namespace {

constexpr size_t kDeviceBytes = size_t(80) << 30;

std::mutex g_mu;
std::map<const char*, size_t> g_device;  // live cudaMalloc'ed blocks, by address
std::map<const char*, size_t> g_pinned;  // cudaHostAlloc'ed and registered host memory (mapped)
size_t g_device_used = 0;
thread_local int g_current_device = 0;

cudaError_t fail_with(cudaError_t e) {
  mt_emu::set_last_error(e);
  return e;
}

// The block of `blocks` starting at or before p (start, length), or {nullptr, 0}.
std::pair<const char*, size_t> block_at_or_before(const std::map<const char*, size_t>& blocks, const void* p) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = blocks.upper_bound(static_cast<const char*>(p));
  if (it == blocks.begin()) return {nullptr, 0};
  --it;
  return *it;
}
// Whether [p, p + bytes) lies in one block of `blocks`.
bool within(const std::map<const char*, size_t>& blocks, const void* p, size_t bytes) {
  const auto [start, length] = block_at_or_before(blocks, p);
  return start && static_cast<const char*>(p) + bytes <= start + length;
}
bool on_device(const void* p, size_t bytes) { return within(g_device, p, bytes); }
// What a kernel or a device-side copy may touch: device memory, or mapped (pinned) host memory.
bool device_reachable(const void* p, size_t bytes) { return on_device(p, bytes) || within(g_pinned, p, bytes); }
bool pageable(const void* p, size_t bytes) { return !device_reachable(p, bytes); }
// Whether p lies in a block of `blocks` or one past its end (an empty range's pointer).
bool inside_or_end(const std::map<const char*, size_t>& blocks, const void* p) {
  const auto [start, length] = block_at_or_before(blocks, p);
  return start && static_cast<const char*>(p) <= start + length;
}
// A copy's kind names where each side is: device and host memory are one here, so a pageable
// host pointer passed as a device one (or a device pointer as a host one) is refused, as the
// device would fault on it.
bool sides_match(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToDevice: return device_reachable(dst, bytes) && !on_device(src, bytes);
    case cudaMemcpyDeviceToHost: return !on_device(dst, bytes) && device_reachable(src, bytes);
    case cudaMemcpyDeviceToDevice: return device_reachable(dst, bytes) && device_reachable(src, bytes);
    case cudaMemcpyHostToHost: return !on_device(dst, bytes) && !on_device(src, bytes);
    default: return true;  // cudaMemcpyDefault: either
  }
}
void add_pinned(void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_pinned[static_cast<const char*>(p)] = bytes;
}
void remove_pinned(void* p) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_pinned.erase(static_cast<const char*>(p));
}

}  // namespace

void mt_emu::check_kernel_pointer(const char* kernel, int index, const void* p) {
  if (!p || inside_or_end(g_device, p) || inside_or_end(g_pinned, p)) return;
  std::fprintf(stderr,
               "cuda_emu: kernel %s, argument %d: %p is neither device memory nor mapped host memory "
               "(a GPU faults on it)\n",
               kernel, index, p);
  std::abort();
}

void mt_emu::check_device_range(const char* call, const char* operand, const void* p, size_t bytes) {
  if (bytes == 0 || device_reachable(p, bytes)) return;
  std::fprintf(stderr, "cuda_emu: %s, %s: [%p, +%zu bytes) is not inside one device or mapped host allocation\n",
               call, operand, p, bytes);
  std::abort();
}

extern "C" {

cudaError_t cudaGetLastError() { return mt_emu::take_last_error(); }
cudaError_t cudaPeekAtLastError() { return mt_emu::peek_last_error(); }
// The names of the errors the emulation and the tests produce; others by number.
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaError (emulated; see its number)";
  }
}
const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : cudaGetErrorName(e); }
const char* cublasGetStatusString(cublasStatus_t) { return "cuBLAS status (emulated cuBLASLt)"; }

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  return attr == cudaFuncAttributeMaxDynamicSharedMemorySize ? mt_emu::set_max_dynamic_shared(func, value)
                                                             : cudaSuccess;
}

// ---- devices ----------------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  if (d != 0) return fail_with(cudaErrorInvalidDevice);
  g_current_device = d;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
  *d = g_current_device;
  return cudaSuccess;
}
cudaError_t cudaSetDeviceFlags(unsigned) { return cudaSuccess; }
// Stream capture (CUDA graphs), which the cuDNN frontend's execute and destructors ask about: the
// emulated streams never capture.
cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode*) { return cudaSuccess; }
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t, cudaStreamCaptureStatus* status, unsigned long long* id,
                                     cudaGraph_t* graph, const cudaGraphNode_t** deps, const cudaGraphEdgeData** edges,
                                     size_t* n) {
  if (status) *status = cudaStreamCaptureStatusNone;
  if (id) *id = 0;
  if (graph) *graph = nullptr;
  if (deps) *deps = nullptr;
  if (edges) *edges = nullptr;
  if (n) *n = 0;
  return cudaSuccess;
}
cudaError_t cudaUserObjectCreate(cudaUserObject_t*, void*, cudaHostFn_t, unsigned, unsigned) {
  return fail_with(cudaErrorNotSupported);
}
cudaError_t cudaUserObjectRelease(cudaUserObject_t, unsigned) { return fail_with(cudaErrorNotSupported); }
cudaError_t cudaGraphRetainUserObject(cudaGraph_t, cudaUserObject_t, unsigned, unsigned) {
  return fail_with(cudaErrorNotSupported);
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (d != 0) return fail_with(cudaErrorInvalidDevice);
  *p = cudaDeviceProp{};
  std::strncpy(p->name, "CUDA emulation (tests/cuda_emu)", sizeof p->name - 1);
  p->major = 9;
  p->minor = 0;
  p->totalGlobalMem = kDeviceBytes;
  p->multiProcessorCount = 132;
#pragma push_macro("warpSize")
#undef warpSize
  p->warpSize = 32;
#pragma pop_macro("warpSize")
  p->maxThreadsPerBlock = 1024;
  p->sharedMemPerBlock = 48 * 1024;
  p->sharedMemPerBlockOptin = 227 * 1024;
  return cudaSuccess;
}
// What the cuDNN frontend asks of the device (its sm version), from the properties above.
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int d) {
  cudaDeviceProp p;
  if (const cudaError_t e = cudaGetDeviceProperties(&p, d); e != cudaSuccess) return e;
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; return cudaSuccess;
    default: return fail_with(cudaErrorInvalidValue);
  }
}
cudaError_t cudaDeviceSynchronize() {
  mt_emu::run_device();
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  std::lock_guard<std::mutex> lock(g_mu);
  *total = kDeviceBytes;
  *free_bytes = kDeviceBytes - g_device_used;
  return cudaSuccess;
}

// ---- memory -----------------------------------------------------------------------------------

cudaError_t cudaMalloc(void** p, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mu);
  *p = nullptr;
  if (bytes > kDeviceBytes - g_device_used) return fail_with(cudaErrorMemoryAllocation);
  // 256-byte aligned as cudaMalloc's; exactly `bytes` long, so ASan sees an overrun by one byte.
  if (posix_memalign(p, 256, bytes == 0 ? 1 : bytes) != 0) {
    *p = nullptr;
    return fail_with(cudaErrorMemoryAllocation);
  }
  std::memset(*p, 0xff, bytes);  // as cuda_test_util's poison: uninitialised reads show as NaN
  g_device[static_cast<const char*>(*p)] = bytes;
  g_device_used += bytes;
  return cudaSuccess;
}
// The block stays until the work queued before runs (cudaFree synchronises; cudaFreeAsync frees
// in its stream's order), so a kernel still reading it would read freed memory (ASan).
static cudaError_t free_now(void* p) {
  std::lock_guard<std::mutex> lock(g_mu);
  const auto it = g_device.find(static_cast<const char*>(p));
  if (it == g_device.end()) return fail_with(cudaErrorInvalidValue);
  g_device_used -= it->second;
  g_device.erase(it);
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  if (!on_device(p, 1)) return fail_with(cudaErrorInvalidValue);
  mt_emu::run_device();
  return free_now(p);
}
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t) { return cudaMalloc(p, bytes); }
cudaError_t cudaFreeAsync(void* p, cudaStream_t s) {
  if (!p) return cudaSuccess;
  if (!on_device(p, 1)) return fail_with(cudaErrorInvalidValue);
  mt_emu::enqueue(s, [p] { free_now(p); }, false);
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned) {
  *p = std::malloc(bytes == 0 ? 1 : bytes);
  if (!*p) return fail_with(cudaErrorMemoryAllocation);
  add_pinned(*p, bytes);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) { return cudaHostAlloc(p, bytes, 0); }
cudaError_t cudaFreeHost(void* p) {
  mt_emu::run_device();
  remove_pinned(p);
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaHostRegister(void* p, size_t bytes, unsigned) {
  add_pinned(p, bytes);
  return cudaSuccess;
}
cudaError_t cudaHostUnregister(void* p) {
  mt_emu::run_device();
  remove_pinned(p);
  return cudaSuccess;
}


cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
  if (bytes == 0) return cudaSuccess;
  if (!sides_match(dst, src, bytes, kind)) return fail_with(cudaErrorInvalidValue);
  if (pageable(src, bytes) && !pageable(dst, bytes)) {
    // From pageable memory: the stream's earlier work first, then the source is staged at once.
    mt_emu::run_stream(s);
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
    mt_emu::enqueue(s, [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); }, false);
    return cudaSuccess;
  }
  mt_emu::enqueue(s, [dst, src, bytes] { std::memmove(dst, src, bytes); }, false);
  if (pageable(dst, bytes)) mt_emu::run_stream(s);  // to pageable memory: returns when done
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
  if (e == cudaSuccess) mt_emu::run_stream(nullptr);
  return e;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s) {
  if (bytes == 0) return cudaSuccess;
  if (!device_reachable(p, bytes)) return fail_with(cudaErrorInvalidValue);
  mt_emu::enqueue(s, [p, value, bytes] { std::memset(p, value, bytes); }, false);
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  const cudaError_t e = cudaMemsetAsync(p, value, bytes, nullptr);
  if (e == cudaSuccess) mt_emu::run_stream(nullptr);
  return e;
}

// ---- streams and events -----------------------------------------------------------------------

cudaError_t cudaStreamCreate(cudaStream_t* s) {
  *s = mt_emu::create_stream(true);
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  *s = mt_emu::create_stream((flags & cudaStreamNonBlocking) == 0);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  mt_emu::destroy_stream(s);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  mt_emu::run_stream(s);
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  mt_emu::stream_wait_event(s, e);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = mt_emu::create_event();
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  mt_emu::destroy_event(e);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  mt_emu::record_event(e, s);
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) { return mt_emu::query_event(e); }
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  mt_emu::run_event(e);
  return cudaSuccess;
}
// Both records must have run (cudaErrorNotReady otherwise, as CUDA answers).
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  std::chrono::steady_clock::time_point a, b;
  if (!mt_emu::event_time(start, &a) || !mt_emu::event_time(end, &b)) return cudaErrorNotReady;  // not sticky
  *ms = std::chrono::duration<float, std::milli>(b - a).count();
  return cudaSuccess;
}

}  // extern "C"

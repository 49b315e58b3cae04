// The emulated device's streams (streams.cc): work is queued per stream and runs as late as the
// host lets it — when the host waits for it (a stream, event or device synchronisation, a
// blocking copy), and then only what that wait needs, dependencies first. So a host that
// reuses a pinned buffer before the copy reading it has run, reads a copy's destination before
// waiting for it, or a stream that uses another's result without cudaStreamWaitEvent, meets
// the data unwritten or overwritten, as a busy GPU can make it. A first cudaEventQuery of an
// unfinished event answers cudaErrorNotReady (the host's not-ready paths run); the next one
// runs the work and answers success. MT_CUDA_EMU_ORDER picks the order:
//   late          (the default) as above;
//   copies-first  copies, fills and event records run as soon as their stream and waits let
//                 them, kernels late: a copy overwriting what a queued kernel has yet to read
//                 (a missing wait before reusing a buffer) shows, which `late` hides;
//   kernels-first kernels run as soon as their stream lets them (the copies they wait for
//                 then), other copies late: a copy reading what a later kernel overwrites shows;
//   eager         everything at once on the calling thread, in the host's order.
#pragma once
#include <cuda_runtime.h>

#include <chrono>
#include <functional>

namespace mt_emu {

enum class Order { kLate, kCopiesFirst, kKernelsFirst, kEager };
Order order();

// Queues `work` (a kernel or library call, or else a copy, fill or free) on stream s (nullptr: the legacy default stream, ordered after every blocking
// stream's earlier work and before their later work, as CUDA orders it).
void enqueue(cudaStream_t s, std::function<void()> work, bool kernel);
// Runs stream s's queued work (and what it waits for); all of every stream's.
void run_stream(cudaStream_t s);
void run_device();

cudaStream_t create_stream(bool blocking);
void destroy_stream(cudaStream_t s);  // its queued work runs first

cudaEvent_t create_event();
void destroy_event(cudaEvent_t e);
void record_event(cudaEvent_t e, cudaStream_t s);
void stream_wait_event(cudaStream_t s, cudaEvent_t e);
// cudaEventQuery's answer: cudaErrorNotReady once per unfinished record, then it runs.
cudaError_t query_event(cudaEvent_t e);
void run_event(cudaEvent_t e);
// When the event's record ran; false while it has not (or it never was recorded).
bool event_time(cudaEvent_t e, std::chrono::steady_clock::time_point* at);

}  // namespace mt_emu

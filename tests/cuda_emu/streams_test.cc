// The emulated device's streams (streams.h): work runs as late as the host lets it (or copies
// early, kernels late), so what a busy GPU can do to a program missing a dependency, the
// emulation does every time. CMakeLists.txt runs these under each order.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <iterator>
#include <thread>

#include "tests/cuda_emu/streams.h"

namespace {

using mt_emu::Config;

struct Buffers {
  float *x = nullptr, *y = nullptr, *pinned = nullptr;
  Buffers() {
    cudaMalloc(reinterpret_cast<void**>(&x), sizeof(float));  // NaN until written
    cudaMalloc(reinterpret_cast<void**>(&y), sizeof(float));
    cudaHostAlloc(reinterpret_cast<void**>(&pinned), sizeof(float), 0);
  }
  ~Buffers() {
    cudaFree(x);
    cudaFree(y);
    cudaFreeHost(pinned);
  }
  float read(const float* p) const {
    float v = -1.f;
    cudaMemcpy(&v, p, sizeof v, cudaMemcpyDeviceToHost);
    return v;
  }
};

void copy_kernel(cudaStream_t s, float* dst, const float* src) {
  mt_emu::launch(Config(dim3(1), dim3(1), 0, s), nullptr, "copy", [=] { *dst = *src; });
}
void fill_kernel(cudaStream_t s, float* dst, float v) {
  mt_emu::launch(Config(dim3(1), dim3(1), 0, s), nullptr, "fill", [=] { *dst = v; });
}

// Two non-blocking streams and an event: order() records it on `first` and, when asked, makes
// `second` wait for it — the one dependency each race below is about.
struct TwoStreams {
  cudaStream_t first, second;
  cudaEvent_t event;
  TwoStreams() {
    cudaStreamCreateWithFlags(&first, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&second, cudaStreamNonBlocking);
    cudaEventCreate(&event);
  }
  ~TwoStreams() {
    cudaStreamDestroy(first);
    cudaStreamDestroy(second);
    cudaEventDestroy(event);
  }
  void order(bool wait) {
    cudaEventRecord(event, first);
    if (wait) cudaStreamWaitEvent(second, event, 0);
  }
};

using mt_emu::Order;
#define MT_REQUIRE_ORDER(...)                                                                   \
  do {                                                                                          \
    const Order allowed[] = {__VA_ARGS__};                                                      \
    if (std::find(std::begin(allowed), std::end(allowed), mt_emu::order()) == std::end(allowed)) \
      GTEST_SKIP() << "not under this MT_CUDA_EMU_ORDER";                                       \
  } while (0)

// One stream writes x, another copies it to y: only cudaStreamWaitEvent orders the two.
float cross_stream_read(bool wait) {
  Buffers b;
  TwoStreams s;  // producer, consumer
  fill_kernel(s.first, b.x, 7.f);
  s.order(wait);
  copy_kernel(s.second, b.y, b.x);
  cudaStreamSynchronize(s.second);
  return b.read(b.y);
}

TEST(CudaEmulatorStreams, AConsumerStreamWithoutItsWaitReadsUnwrittenData) {
  MT_REQUIRE_ORDER(Order::kLate, Order::kCopiesFirst);
  EXPECT_EQ(cross_stream_read(true), 7.f);
  EXPECT_TRUE(std::isnan(cross_stream_read(false)));
}

TEST(CudaEmulatorStreams, APinnedSourceOverwrittenBeforeItsCopyRanIsWhatTheCopyReads) {
  MT_REQUIRE_ORDER(Order::kLate);
  Buffers b;
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  *b.pinned = 1.f;
  cudaMemcpyAsync(b.x, b.pinned, sizeof(float), cudaMemcpyHostToDevice, s);
  *b.pinned = 2.f;  // the race: the copy has not run
  cudaStreamSynchronize(s);
  EXPECT_EQ(b.read(b.x), 2.f);
  cudaMemcpyAsync(b.x, b.pinned, sizeof(float), cudaMemcpyHostToDevice, s);
  cudaStreamSynchronize(s);  // the fix
  *b.pinned = 3.f;
  EXPECT_EQ(b.read(b.x), 2.f);
  // From pageable memory the source is staged before the call returns (CUDA's rule).
  float pageable = 4.f;
  cudaMemcpyAsync(b.y, &pageable, sizeof(float), cudaMemcpyHostToDevice, s);
  pageable = 5.f;
  cudaStreamSynchronize(s);
  EXPECT_EQ(b.read(b.y), 4.f);
  cudaStreamDestroy(s);
}

TEST(CudaEmulatorStreams, AnEventAnswersNotReadyOnceThenItsWorkRuns) {
  MT_REQUIRE_ORDER(Order::kLate, Order::kCopiesFirst);  // (kernels first: the kernel has run)
  Buffers b;
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEvent_t start, done;
  cudaEventCreate(&start);
  cudaEventCreate(&done);
  EXPECT_EQ(cudaEventQuery(done), cudaSuccess) << "never recorded";
  *b.pinned = 0.f;
  cudaEventRecord(start, s);
  fill_kernel(s, b.x, 9.f);
  cudaMemcpyAsync(b.pinned, b.x, sizeof(float), cudaMemcpyDeviceToHost, s);
  cudaEventRecord(done, s);
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, done), cudaErrorNotReady);
  EXPECT_EQ(*b.pinned, 0.f) << "the copy ran before anyone waited";
  EXPECT_EQ(cudaEventQuery(done), cudaErrorNotReady);
  EXPECT_EQ(cudaEventQuery(done), cudaSuccess);
  EXPECT_EQ(*b.pinned, 9.f);
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, done), cudaSuccess);
  EXPECT_GE(ms, 0.f);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "not-ready answers are not sticky errors";
  cudaEventDestroy(start);
  cudaEventDestroy(done);
  cudaStreamDestroy(s);
}

// The legacy default stream orders itself after blocking streams' earlier work (and they after
// its), so a blocking cudaMemcpy sees what a blocking stream computed; a non-blocking stream's
// work it does not wait for.
TEST(CudaEmulatorStreams, TheDefaultStreamWaitsForBlockingStreamsOnly) {
  MT_REQUIRE_ORDER(Order::kLate, Order::kCopiesFirst);
  Buffers b;
  cudaStream_t blocking, non_blocking;
  cudaStreamCreate(&blocking);
  cudaStreamCreateWithFlags(&non_blocking, cudaStreamNonBlocking);
  fill_kernel(blocking, b.x, 1.f);
  fill_kernel(non_blocking, b.y, 2.f);
  EXPECT_EQ(b.read(b.x), 1.f);
  EXPECT_TRUE(std::isnan(b.read(b.y)));
  cudaDeviceSynchronize();
  EXPECT_EQ(b.read(b.y), 2.f);
  cudaStreamDestroy(blocking);
  cudaStreamDestroy(non_blocking);
}

// A host thread's per-thread default stream outlives the thread: its work still runs.
TEST(CudaEmulatorStreams, WorkOnAnEndedThreadsDefaultStreamStillRuns) {
  Buffers b;
  std::thread t([&] { fill_kernel(cudaStreamPerThread, b.x, 3.f); });
  t.join();
  cudaDeviceSynchronize();
  EXPECT_EQ(b.read(b.x), 3.f);
}

// A kernel reads x on one stream; a copy overwrites x on another. Copies first, the copy runs
// before the queued kernel unless the copy's stream waits for the kernel's.
float read_then_overwrite(bool wait) {
  Buffers b;
  *b.pinned = 1.f;
  cudaMemcpy(b.x, b.pinned, sizeof(float), cudaMemcpyHostToDevice);
  TwoStreams s;  // reader, writer
  copy_kernel(s.first, b.y, b.x);
  s.order(wait);
  *b.pinned = 2.f;
  cudaMemcpyAsync(b.x, b.pinned, sizeof(float), cudaMemcpyHostToDevice, s.second);
  cudaDeviceSynchronize();
  return b.read(b.y);
}

TEST(CudaEmulatorStreams, CopiesFirstACopyOverwritingWhatAQueuedKernelReadsShows) {
  MT_REQUIRE_ORDER(Order::kCopiesFirst);
  EXPECT_EQ(read_then_overwrite(true), 1.f);
  EXPECT_EQ(read_then_overwrite(false), 2.f);
}

// A copy reads x on one stream; a kernel overwrites x on another. Kernels first, the kernel runs
// before the queued copy unless the kernel's stream waits for the copy's.
float copy_then_overwrite(bool wait) {
  Buffers b;
  *b.pinned = 1.f;
  cudaMemcpy(b.x, b.pinned, sizeof(float), cudaMemcpyHostToDevice);
  *b.pinned = 0.f;
  TwoStreams s;  // reader, writer
  cudaMemcpyAsync(b.pinned, b.x, sizeof(float), cudaMemcpyDeviceToHost, s.first);
  s.order(wait);
  fill_kernel(s.second, b.x, 2.f);
  cudaDeviceSynchronize();
  return *b.pinned;
}

TEST(CudaEmulatorStreams, KernelsFirstAKernelOverwritingWhatAQueuedCopyReadsShows) {
  MT_REQUIRE_ORDER(Order::kKernelsFirst);
  EXPECT_EQ(copy_then_overwrite(true), 1.f);
  EXPECT_EQ(copy_then_overwrite(false), 2.f);
}

}  // namespace

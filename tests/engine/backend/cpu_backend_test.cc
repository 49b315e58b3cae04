// The CPU backend as a device: its compute stream is asynchronous like a CUDA stream (an op
// call returns at once; events complete when the work before them has run), a synchronous
// mode runs ops on the caller, and an injected fault is a sticky error after which nothing runs.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "engine/backend/backend.h"

namespace mt {
namespace {

// A link slow enough that a 1 MB copy holds its stream for 0.5 s: far longer than the few
// calls a test makes between enqueueing and checking.
constexpr double kSlowGbps = 0.002;
constexpr size_t kSlowBytes = 1'000'000;
CpuBackendOptions slow_link() {
  CpuBackendOptions o;
  o.link_gbps = kSlowGbps;
  return o;
}

struct Device {
  std::unique_ptr<Backend> b;
  float* buf = nullptr;  // 16 floats on the device
  float* big = nullptr;  // kSlowBytes on the device
};

Device make_device(const CpuBackendOptions& o) {
  Device d{make_cpu_backend(o)};
  EXPECT_TRUE(d.b->reserve_device(kSlowBytes + 4096).ok());
  d.buf = static_cast<float*>(*d.b->device_alloc(16 * sizeof(float)));
  d.big = static_cast<float*>(*d.b->device_alloc(kSlowBytes));
  return d;
}

// Compute that waits on a slow H2D copy: enqueued, not yet run.
EventPtr hold_compute_behind_a_slow_copy(Device& d, const std::vector<char>& host) {
  d.b->copy_h2d(d.big, host.data(), kSlowBytes);
  EventPtr copied = d.b->record(StreamKind::kH2D);
  d.b->stream_wait(StreamKind::kCompute, copied);
  return copied;
}

TEST(CpuBackendAsync, OpsReturnAtOnceAndEventsCompleteWhenTheWorkHasRun) {
  Device d = make_device(slow_link());
  const std::vector<char> host(kSlowBytes, 1);
  std::vector<float> ones(16, 1.0f), out(16, 0.0f);
  d.b->copy_h2d(d.buf, ones.data(), sizeof(float) * 16);
  d.b->host_wait(d.b->record(StreamKind::kH2D));
  hold_compute_behind_a_slow_copy(d, host);  // stream_wait returns without blocking the host
  d.b->ops().zero(d.buf, 16);
  EventPtr zeroed = d.b->record(StreamKind::kCompute);
  EXPECT_FALSE(zeroed->done()) << "the op ran on the calling thread";
  d.b->stream_wait(StreamKind::kD2H, zeroed);
  d.b->copy_d2h(out.data(), d.buf, sizeof(float) * 16);
  d.b->host_wait(d.b->record(StreamKind::kD2H));
  EXPECT_TRUE(zeroed->done());
  for (float v : out) EXPECT_EQ(v, 0.0f);
  EXPECT_TRUE(d.b->error().ok());
}

TEST(CpuBackendAsync, SyncComputeRunsOpsOnTheCaller) {
  CpuBackendOptions o = slow_link();
  o.sync_compute = true;
  Device d = make_device(o);
  const std::vector<char> host(kSlowBytes, 1);
  EventPtr copied = hold_compute_behind_a_slow_copy(d, host);  // blocks the host instead
  EXPECT_TRUE(copied->done());
  d.b->ops().zero(d.buf, 16);
  EXPECT_TRUE(d.b->record(StreamKind::kCompute)->done());
}

// elapsed() reads the worker's clock: five ops slowed to 20 ms each span at least 100 ms
// between the events around them, however soon the host has enqueued them.
TEST(CpuBackendAsync, ElapsedIsTheComputeWorkersClock) {
  CpuBackendOptions o;
  o.op_delay_seconds = 0.02;
  Device d = make_device(o);
  EventPtr from = d.b->record(StreamKind::kCompute);
  for (int i = 0; i < 5; ++i) d.b->ops().zero(d.buf, 16);
  EventPtr to = d.b->record(StreamKind::kCompute);
  d.b->host_wait(to);
  EXPECT_GE(d.b->elapsed(from, to), 5 * 0.02);
  EXPECT_EQ(d.b->elapsed(nullptr, to), 0.0);
}

// The head's loss stays on the device until a copy after an event brings it back.
TEST(CpuBackendAsync, LossTotalsAreWrittenOnTheDevice) {
  Device d = make_device({});
  const int N = 3, C = 2, V = 4;
  std::vector<float> x = {0.5f, -1, 2, 0.25f, -0.75f, 1}, W = {1, 0, 0, 1, -1, 1, 0.5f, 0.5f};
  std::vector<int32_t> targets = {1, -1, 3};
  float* dx = d.big;
  float* dev_x = dx + N * C;
  float* dev_w = dev_x + N * C;
  float* scratch = dev_w + V * C;
  auto* dev_t = reinterpret_cast<int32_t*>(scratch + N * V);
  auto* totals = reinterpret_cast<double*>(dev_t + 4);
  d.b->copy_h2d(dev_x, x.data(), x.size() * sizeof(float));
  d.b->copy_h2d(dev_w, W.data(), W.size() * sizeof(float));
  d.b->copy_h2d(dev_t, targets.data(), targets.size() * sizeof(int32_t));
  d.b->stream_wait(StreamKind::kCompute, d.b->record(StreamKind::kH2D));
  d.b->ops().lm_head_loss(dx, nullptr, nullptr, dev_x, dev_w, dev_t, N, C, V, 2, 1.0f, 0.f, scratch, totals);
  double got[2] = {-1, -1};
  d.b->stream_wait(StreamKind::kD2H, d.b->record(StreamKind::kCompute));
  d.b->copy_d2h(got, totals, sizeof got);
  d.b->host_wait(d.b->record(StreamKind::kD2H));
  std::vector<float> rdx(size_t(N) * C), scr(size_t(N) * V);
  const auto want = cpu::lm_head_loss(rdx.data(), static_cast<float*>(nullptr), static_cast<float*>(nullptr),
                                      x.data(), W.data(), targets.data(), N, C, V, 2, 1.0f, scr.data());
  EXPECT_EQ(got[0], want.loss_sum);
  EXPECT_EQ(got[1], double(want.counted));
}

}  // namespace
}  // namespace mt

namespace mt {
namespace {

// Point 4 on the CPU: the uploader and the compute thread enqueue on the H2D stream at once;
// every byte is counted once and the busy seconds are the link time of those bytes, never two
// copies' time bracketing each other (which would exceed the wall time).
TEST(CpuBackendAsync, TwoThreadsCopyingAtOnceGiveExactByteAndSecondTotals) {
  CpuBackendOptions o;
  o.link_gbps = 0.05;  // 50 MB/s: 20 copies of 100 kB take 40 ms of link time
  auto b = make_cpu_backend(o);
  constexpr size_t kBytes = 100'000, kCopies = 10;
  ASSERT_TRUE(b->reserve_device(2 * kBytes + 4096).ok());
  char* dev[2] = {static_cast<char*>(*b->device_alloc(kBytes)), static_cast<char*>(*b->device_alloc(kBytes))};
  std::vector<char> host(kBytes, 7);
  const auto t0 = std::chrono::steady_clock::now();
  auto copier = [&](int k) {
    for (size_t i = 0; i < kCopies; ++i) b->copy_h2d(dev[k], host.data(), kBytes);
  };
  std::thread a(copier, 0), c(copier, 1);
  a.join();
  c.join();
  b->host_wait(b->record(StreamKind::kH2D));
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const CopyStats st = b->take_copy_stats();
  const double link_seconds = double(2 * kCopies * kBytes) / (o.link_gbps * 1e9);
  EXPECT_EQ(st.h2d_bytes, 2 * kCopies * kBytes);
  EXPECT_EQ(st.d2h_bytes, 0u);
  EXPECT_GE(st.h2d_seconds, link_seconds);
  EXPECT_LE(st.h2d_seconds, wall);
}

}  // namespace
}  // namespace mt

namespace mt {
namespace {

// set_error (what a communicator reports when it aborts a collective enqueued here): the first
// reason is kept, an ok status changes nothing, and from then on no copy runs, as after a fault.
TEST(CpuBackendSetError, KeepsTheFirstReasonAndStopsTheDevice) {
  auto b = make_cpu_backend({});
  ASSERT_TRUE(b->reserve_device(4096).ok());
  float* dev = static_cast<float*>(*b->device_alloc(16 * sizeof(float)));
  b->set_error(Status::Ok());
  EXPECT_TRUE(b->error().ok());
  const float one[4] = {1, 2, 3, 4};
  b->copy_h2d(dev, one, sizeof one);
  b->stream_wait(StreamKind::kD2H, b->record(StreamKind::kH2D));
  float before[4] = {0, 0, 0, 0};
  b->copy_d2h(before, dev, sizeof before);
  b->host_wait(b->record(StreamKind::kD2H));
  ASSERT_EQ(before[3], 4.0f);  // the device works until the error is set
  b->set_error(Status(StatusCode::kUnavailable, "NCCL reduce #3 aborted"));
  b->set_error(internal_error("a later failure"));
  EXPECT_EQ(b->error().code(), StatusCode::kUnavailable);
  EXPECT_EQ(b->error().message(), "NCCL reduce #3 aborted");
  float back[4] = {0, 0, 0, 0};
  b->copy_d2h(back, dev, sizeof back);
  b->host_wait(b->record(StreamKind::kD2H));  // completes: nothing waits forever on a failed device
  EXPECT_EQ(back[0], 0.0f) << "a copy ran after the device failed";
}

}  // namespace
}  // namespace mt

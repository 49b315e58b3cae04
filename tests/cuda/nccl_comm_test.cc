// The NCCL communicator on this machine's CUDA devices (up to 4), one thread per rank as the
// data-parallel executor drives it:
//  * every collective against the in-process one on the same random buffers (odd and zero
//    sizes): NCCL's reduction order is its own, so sums agree within 1e-6 relative; gathers and
//    broadcast exactly; the ranks that receive nothing keep their buffers. Runs on one device too;
//  * the watchdog: a rank that never issues a collective makes the other's fail within the
//    timeout plus slack, naming it, with the host waits on its stream returning; a rank that
//    aborts fails the others at once. These need two devices and skip with fewer, saying so.
// Everything skips where NCCL was not built or no device is present.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <ostream>
#include <random>
#include <thread>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/dist/in_process_comm.h"
#include "engine/dist/nccl_comm.h"

namespace mt {
namespace {

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

#define MT_REQUIRE_NCCL_DEVICES(n)                                                                  \
  do {                                                                                              \
    if (!nccl_built()) GTEST_SKIP() << "built without NCCL";                                        \
    if (device_count() < (n))                                                                       \
      GTEST_SKIP() << "needs " << (n) << " CUDA devices, this machine has " << device_count();      \
  } while (0)

// N ranks: a CUDA backend per device, send and receive buffers on each, and the NCCL group.
struct Ranks {
  std::vector<std::unique_ptr<Backend>> be;
  std::vector<float*> send, recv;
  std::vector<std::unique_ptr<Communicator>> comms;  // destroyed before the backends (declared after)
  size_t cap = 0;

  Ranks(int n, size_t max_elems, double timeout_seconds) : cap(max_elems) {
    std::vector<int> devs;
    for (int d = 0; d < n; ++d) {
      devs.push_back(d);
      CudaBackendOptions o;
      o.device = d;
      auto b = make_cuda_backend(o);
      EXPECT_TRUE(b.ok()) << b.status().to_string();
      if (!b.ok()) return;
      be.push_back(std::move(b).value());
      EXPECT_TRUE(be.back()->reserve_device(2 * cap * sizeof(float) + 4096).ok());
      send.push_back(static_cast<float*>(*be.back()->device_alloc(cap * sizeof(float))));
      recv.push_back(static_cast<float*>(*be.back()->device_alloc(cap * sizeof(float))));
    }
    CommOptions co;
    co.timeout_seconds = timeout_seconds;
    auto c = make_nccl_comms(devs, co);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    if (c.ok()) comms = std::move(c).value();
  }
  bool ok() const { return !comms.empty() && comms.size() == be.size(); }
  int size() const { return int(be.size()); }
  CommOrder at(int r) const { return {be[size_t(r)].get(), StreamKind::kCompute}; }
  void upload(int r, float* dst, const std::vector<float>& v) {
    if (v.empty()) return;
    be[size_t(r)]->copy_h2d(dst, v.data(), v.size() * sizeof(float));
    be[size_t(r)]->stream_wait(StreamKind::kCompute, be[size_t(r)]->record(StreamKind::kH2D));
  }
  std::vector<float> download(int r, const float* src, size_t n) {
    std::vector<float> v(n);
    Backend& b = *be[size_t(r)];
    b.stream_wait(StreamKind::kD2H, b.record(StreamKind::kCompute));
    if (n) b.copy_d2h(v.data(), src, n * sizeof(float));
    b.host_wait(b.record(StreamKind::kD2H));
    return v;
  }
  // Runs f(r) on one thread per rank, as the executor's replicas call.
  void each(const std::function<void(int)>& f) {
    std::vector<std::thread> th;
    for (int r = 0; r < size(); ++r) th.emplace_back([&, r] { f(r); });
    for (auto& t : th) t.join();
  }
};

enum class Op { kAllReduce, kReduce, kReduceScatter, kAllGather, kBroadcast };
const char* op_name(Op op) {
  const char* names[] = {"all_reduce", "reduce", "reduce_scatter", "all_gather", "broadcast"};
  return names[int(op)];
}
void PrintTo(Op op, std::ostream* os) { *os << op_name(op); }

Status call(Communicator& c, Op op, const float* send, float* inout_or_recv, size_t n, int root, const CommOrder& at) {
  switch (op) {
    case Op::kAllReduce: return c.all_reduce(inout_or_recv, n, at);
    case Op::kReduce: return c.reduce(inout_or_recv, n, root, at);
    case Op::kReduceScatter: return c.reduce_scatter(send, inout_or_recv, n, at);
    case Op::kAllGather: return c.all_gather(send, inout_or_recv, n, at);
    case Op::kBroadcast: return c.broadcast(inout_or_recv, n, root, at);
  }
  return internal_error("?");
}

// Whether the op reads `send` (out of place) or works in place on `recv`.
bool out_of_place(Op op) { return op == Op::kReduceScatter || op == Op::kAllGather; }
size_t send_elems(Op op, size_t n, int N) { return op == Op::kReduceScatter ? n * size_t(N) : n; }
size_t recv_elems(Op op, size_t n, int N) { return op == Op::kAllGather ? n * size_t(N) : n; }

class CommNcclOps : public ::testing::TestWithParam<Op> {};

TEST_P(CommNcclOps, MatchesInProcessOnEveryDevice) {
  MT_REQUIRE_NCCL_DEVICES(1);
  const Op op = GetParam();
  const int N = std::min(device_count(), 4);
  const size_t ranks = size_t(N);
  Ranks k(N, 4099 * size_t(N), 60);
  ASSERT_TRUE(k.ok());
  const int root = N - 1;  // not rank 0: a root that is not the first is what goes wrong
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(4099)}) {
    std::mt19937 rng(uint32_t(n) * 7 + uint32_t(op));
    std::uniform_real_distribution<float> u(-1, 1);
    // in[r]: rank r's input (its send buffer, or its in-place buffer); want[r]: what the
    // in-process communicator leaves in the same host buffers.
    std::vector<std::vector<float>> in(ranks), want(ranks);
    for (int r = 0; r < N; ++r) {
      in[size_t(r)].resize(out_of_place(op) ? send_elems(op, n, N) : n);
      for (float& x : in[size_t(r)]) x = u(rng);
      want[size_t(r)] = out_of_place(op) ? std::vector<float>(recv_elems(op, n, N), nan) : in[size_t(r)];
    }
    auto ref = make_in_process_comms(N);
    std::vector<Status> rs(ranks);
    k.each([&](int r) {
      rs[size_t(r)] = call(*ref[size_t(r)], op, in[size_t(r)].data(), want[size_t(r)].data(), n, root, {});
    });
    for (const Status& s : rs) ASSERT_TRUE(s.ok()) << s.to_string();

    std::vector<Status> got_status(ranks);
    std::vector<std::vector<float>> got(ranks);
    k.each([&](int r) {
      const size_t rn = out_of_place(op) ? recv_elems(op, n, N) : n;
      const std::vector<float> poison(rn, nan);  // what NCCL leaves unwritten stays NaN; lives past the copy
      if (out_of_place(op)) {
        k.upload(r, k.send[size_t(r)], in[size_t(r)]);
        k.upload(r, k.recv[size_t(r)], poison);
      } else {
        k.upload(r, k.recv[size_t(r)], in[size_t(r)]);
      }
      got_status[size_t(r)] = call(*k.comms[size_t(r)], op, k.send[size_t(r)], k.recv[size_t(r)], n, root, k.at(r));
      got[size_t(r)] = k.download(r, k.recv[size_t(r)], rn);
    });
    for (int r = 0; r < N; ++r) {
      ASSERT_TRUE(got_status[size_t(r)].ok()) << got_status[size_t(r)].to_string();
      ASSERT_TRUE(k.be[size_t(r)]->error().ok()) << k.be[size_t(r)]->error().to_string();
      const auto& w = want[size_t(r)];
      ASSERT_EQ(got[size_t(r)].size(), w.size());
      const bool sums = op != Op::kAllGather && op != Op::kBroadcast && N > 1;
      for (size_t i = 0; i < w.size(); ++i) {
        const float tol = sums ? 1e-6f * std::fabs(w[i]) + 1e-7f : 0.0f;
        ASSERT_NEAR(got[size_t(r)][i], w[i], tol) << op_name(op) << " n=" << n << " rank " << r << " [" << i << "]";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllCollectives, CommNcclOps,
                         ::testing::Values(Op::kAllReduce, Op::kReduce, Op::kReduceScatter, Op::kAllGather,
                                           Op::kBroadcast),
                         [](const auto& info) { return std::string(op_name(info.param)); });

// A CommOrder without this rank's CUDA backend is refused by name, and nothing is launched.
TEST(CommNccl, RefusesAnOrderWithoutItsDevicesBackend) {
  MT_REQUIRE_NCCL_DEVICES(1);
  Ranks k(1, 16, 60);
  ASSERT_TRUE(k.ok());
  const Status s = k.comms[0]->all_reduce(k.recv[0], 4, CommOrder{});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("CUDA backend of device 0"), std::string::npos) << s.to_string();
  EXPECT_TRUE(k.comms[0]->all_reduce(k.recv[0], 4, k.at(0)).ok());  // the group is unharmed
}

// Rank 1 never issues the second collective (cold: the first one, whose launch connects the
// peers). Rank 0's fails within the timeout plus slack — from its launch, or from the watchdog
// while it is in flight — naming rank 1; the host wait on rank 0's stream returns (the abort
// released the kernel) and its backend carries the error; every later collective fails at once.
class CommNcclWatchdog : public ::testing::TestWithParam<bool> {};

TEST_P(CommNcclWatchdog, NamesTheRankThatNeverArrives) {
  MT_REQUIRE_NCCL_DEVICES(2);
  const bool warm = GetParam();
  const double timeout = 2.0, slack = 3.0;
  Ranks k(2, 1024, timeout);
  ASSERT_TRUE(k.ok());
  if (warm) {
    std::vector<Status> s(2);
    k.each([&](int r) {
      s[size_t(r)] = k.comms[size_t(r)]->all_reduce(k.recv[size_t(r)], 1024, k.at(r));
      k.be[size_t(r)]->host_wait(k.be[size_t(r)]->record(StreamKind::kCompute));
    });
    ASSERT_TRUE(s[0].ok() && s[1].ok()) << s[0].to_string() << " / " << s[1].to_string();
  }
  const auto t0 = std::chrono::steady_clock::now();
  const Status launched = k.comms[0]->reduce(k.recv[0], 1024, 0, k.at(0));
  k.be[0]->host_wait(k.be[0]->record(StreamKind::kCompute));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Status why = launched.ok() ? k.be[0]->error() : launched;
  ASSERT_FALSE(why.ok()) << "rank 0's reduce completed without rank 1";
  EXPECT_NE(why.message().find("rank 1 (CUDA device 1) has not issued it"), std::string::npos) << why.to_string();
  EXPECT_NE(why.message().find("reduce"), std::string::npos) << why.to_string();
  EXPECT_GE(waited, timeout * 0.9);
  EXPECT_LT(waited, timeout + slack) << why.to_string();
  // The group has failed: rank 1's next collective returns the reason at once, without waiting.
  const auto t1 = std::chrono::steady_clock::now();
  const Status later = k.comms[1]->all_reduce(k.recv[1], 8, k.at(1));
  EXPECT_FALSE(later.ok());
  EXPECT_NE(later.message().find("rank 1 (CUDA device 1)"), std::string::npos) << later.to_string();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 1.0);
  EXPECT_FALSE(k.comms[0]->all_reduce(k.recv[0], 8, k.at(0)).ok());
}

INSTANTIATE_TEST_SUITE_P(ColdAndWarm, CommNcclWatchdog, ::testing::Values(false, true),
                         [](const auto& info) { return std::string(info.param ? "warm" : "cold"); });

// A rank that fails (its device, its data) aborts the group: the other, waiting in a collective,
// fails at once with its reason — long before the timeout.
TEST(CommNccl, AnAbortingRankFailsTheOtherAtOnce) {
  MT_REQUIRE_NCCL_DEVICES(2);
  Ranks k(2, 1024, 120);
  ASSERT_TRUE(k.ok());
  std::vector<Status> warm(2);
  k.each([&](int r) { warm[size_t(r)] = k.comms[size_t(r)]->all_reduce(k.recv[size_t(r)], 16, k.at(r)); });
  ASSERT_TRUE(warm[0].ok() && warm[1].ok());
  const auto t0 = std::chrono::steady_clock::now();
  std::thread rank1([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    k.comms[1]->abort(internal_error("its device faulted"));
  });
  const Status launched = k.comms[0]->all_reduce(k.recv[0], 1024, k.at(0));
  k.be[0]->host_wait(k.be[0]->record(StreamKind::kCompute));
  rank1.join();
  const Status why = launched.ok() ? k.be[0]->error() : launched;
  EXPECT_NE(why.message().find("rank 1 (CUDA device 1) failed: its device faulted"), std::string::npos)
      << why.to_string();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
}

}  // namespace
}  // namespace mt

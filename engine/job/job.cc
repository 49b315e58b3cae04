#include "engine/job/job.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <filesystem>
#include <map>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <optional>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/io/hf_io.h"
#include "engine/io/tensorboard.h"
#include "engine/job/job_checkpoints.h"
#include "engine/job/job_data.h"
#include "engine/job/job_start.h"
#include "engine/base/file_lock.h"
#include "engine/base/utc_time.h"
#include "engine/dist/launch_env.h"
#include "engine/dist/mpi_comm.h"
#include "engine/dist/nccl_comm.h"
#include "engine/exec/data_parallel_executor.h"
#include "engine/exec/resident_executor.h"
#include "engine/exec/streaming_executor.h"
#include "kernels/gemm_provider.h"

namespace mt {

Result<ModelConfig> resolve_model(const JobSpec& spec) {
  if (!spec.model.preset.empty()) return preset_config(spec.model.preset);
  if (!spec.model.hf_config.empty()) return load_model_config(spec.model.hf_config);
  return load_model_config(spec.model.hf_model);
}

uint64_t default_device_budget() { return cuda_free_device_memory(); }

bool uses_cuda(const JobSpec& spec) { return spec.backend == "cuda" || (spec.backend == "auto" && cuda_available()); }

Precision job_precision(const JobSpec& spec) {
  auto p = resolve_precision(spec.precision, uses_cuda(spec));
  return p.ok() ? *p : Precision::kFp32;  // validate(spec) refuses any other name first
}

TrainOptions job_train_options(const JobSpec& spec) {
  TrainOptions t = spec.train;
  t.precision = job_precision(spec);
  return t;
}

namespace {

// The CUDA backend of a job's d-th device (CUDA device d): cuDNN attention's workspace, when
// that is the attention kernel, sized for one micro-batch of this model.
CudaBackendOptions cuda_options(const JobSpec& spec, const ModelConfig& cfg, int device) {
  CudaBackendOptions o;
  o.device = device;
  o.attention_workspace_bytes = cuda_attention_workspace_bytes(int(spec.train.micro_batch), int(spec.train.seq_len),
                                                               cfg.num_heads, cfg.num_kv_heads, cfg.head_dim);
  return o;
}

}  // namespace

PlanOptions job_plan_options(const JobSpec& spec, const ModelConfig& cfg, uint64_t host_budget,
                             uint64_t device_budget, int processes) {
  PlanOptions p;
  p.slots = spec.slots;
  p.expert_slots = spec.expert_slots;
  if (auto placement = parse_checkpoint_placement(spec.checkpoint_placement); placement.ok()) p.placement = *placement;
  p.host_budget = host_budget;
  p.device_budget = device_budget;
  p.devices = spec.devices;
  p.processes = processes;
  p.shard_optimizer = spec.shard_optimizer;
  p.eval_set_bytes = HeldOutSet::host_bytes(spec);
  if (spec.offload == "nvme") p.nvme = spec.nvme, p.nvme_gbps = spec.nvme_gbps;
  if (auto s = parse_speculation(spec.speculative_updates); s.ok() && spec.executor == "streaming") p.speculation = *s;
  if (uses_cuda(spec)) {
    const uint64_t tokens = uint64_t(spec.train.micro_batch) * uint64_t(spec.train.seq_len);
    // the op scratch's widest norm: the hidden size, or a q/k norm over a whole projection (OLMo 2)
    const int widest_norm = std::max({cfg.hidden_size, cfg.q_norm_width(), cfg.k_norm_width()});
    const uint64_t moe = cfg.has_experts() || cfg.attention_sinks
                             ? cuda_moe_scratch_bytes(tokens, cfg.moe.num_experts, std::max(cfg.moe.top_k, 1), cfg.num_heads)
                             : 0;
    p.backend_bytes = cuda_fixed_device_bytes(cuda_options(spec, cfg, 0), tokens, uint64_t(widest_norm), moe);
  }
  return p;
}

// Each path a directory, and each filesystem (paths that share one, together) with room for
// its share of the tier's bytes.
Status check_nvme_space(const MemoryPlan& plan, const NvmeTierOptions& nvme) {
  std::map<dev_t, std::pair<uint64_t, uint64_t>> need_free;  // per filesystem: bytes needed, free
  for (const std::string& path : nvme.paths) {
    struct stat st {};
    struct statvfs fs {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || ::statvfs(path.c_str(), &fs) != 0)
      return failed_precondition("memory.nvme_paths: '" + path + "' is not a directory this process can use");
    auto& [need, free] = need_free[st.st_dev];
    need += plan.nvme.drive_bytes_per_path;
    free = uint64_t(fs.f_bavail) * uint64_t(fs.f_frsize);
    if (need > free)
      return resource_exhausted("memory.nvme_paths: '" + path + "' has " + format_bytes(free) + " free; the NVMe tier needs " +
                                format_bytes(need) + " there (" + format_bytes(plan.nvme.drive_bytes) + " over " +
                                std::to_string(nvme.paths.size()) + " paths)");
  }
  return Status::Ok();
}

Result<MemoryPlan> plan_for_job(const JobSpec& spec, const ModelConfig& cfg, uint64_t host_budget,
                                uint64_t device_budget, int processes, double device_tflops) {
  MT_RETURN_IF_ERROR(validate(spec));
  if (uses_cuda(spec)) MT_RETURN_IF_ERROR(cuda_supports_head_dim(cfg.head_dim));
  PlanOptions po = job_plan_options(spec, cfg, host_budget, device_budget, processes);
  po.device_tflops = device_tflops;
  return plan_memory(cfg, job_train_options(spec), po);
}

Result<int> longest_seq_len(const JobSpec& spec, const ModelConfig& cfg, uint64_t host_budget, uint64_t device_budget) {
  JobSpec s = spec;
  auto fits = [&](int T) -> Result<bool> {
    s.train.seq_len = T;
    MT_ASSIGN_OR_RETURN(MemoryPlan p, plan_for_job(s, cfg, host_budget, device_budget));
    return p.fits;
  };
  const int64_t by_tokens = TrainLimits::kTokensPerStep / std::max(1, spec.train.global_batch);
  int lo = 1, hi = int(std::min<int64_t>(TrainLimits::kSeqLen, by_tokens));  // fits(lo); answer in [lo, hi]
  MT_ASSIGN_OR_RETURN(bool any, fits(lo));
  if (!any) return failed_precondition("not even seq_len = 1 fits the budgets");
  MT_ASSIGN_OR_RETURN(bool all, fits(hi));
  if (all) return hi;
  while (hi - lo > 1) {  // fits(lo), !fits(hi)
    const int mid = lo + (hi - lo) / 2;
    MT_ASSIGN_OR_RETURN(bool ok, fits(mid));
    (ok ? lo : hi) = mid;
  }
  return lo;
}

namespace {

// `device`: the job's d-th device; on CUDA, CUDA device d (megatraind --devices N owns 0..N-1).
Result<std::unique_ptr<Backend>> make_backend(const JobSpec& spec, const ModelConfig& cfg, int device) {
  if (uses_cuda(spec)) return make_cuda_backend(cuda_options(spec, cfg, device));
  CpuBackendOptions o;
  o.link_gbps = spec.link_gbps;
  return make_cpu_backend(o);
}

// Several processes: this one's place among them, from its launcher (mpirun, srun), and the two
// MPI communicators its executor uses (NodeComms). One process: none.
struct Nodes {
  std::unique_ptr<Communicator> grads, losses, weights;  // weights: sharded optimizer only
  NodeComms comms() const { return {grads.get(), losses.get(), weights.get()}; }
};

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

// devices: N > 1 on CUDA: the NCCL group over CUDA devices 0..N-1 (the in-process group reads
// device memory from the host). Otherwise none: the executor makes its in-process group.
Result<std::vector<std::unique_ptr<Communicator>>> device_comms(const JobSpec& spec, const CommOptions& co) {
  if (!uses_cuda(spec) || spec.devices == 1) return std::vector<std::unique_ptr<Communicator>>{};
  std::vector<int> cuda_devices(size_t(spec.devices));
  std::iota(cuda_devices.begin(), cuda_devices.end(), 0);
  return make_nccl_comms(cuda_devices, co);
}

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
  const PlanOptions po = job_plan_options(spec, cfg, host_budget, device_budget);
  StreamingOptions so;
  so.slots = po.slots;
  so.expert_slots = po.expert_slots;
  so.placement = po.placement;
  so.device_budget = po.device_budget;
  so.backend_bytes = po.backend_bytes;
  so.link_gbps = spec.link_gbps;
  so.speculation = po.speculation;
  so.host_budget = po.host_budget;
  so.nvme = po.nvme;
  if (!so.nvme.paths.empty()) {
    MT_ASSIGN_OR_RETURN(const MemoryPlan plan, plan_memory(cfg, job_train_options(spec), po));
    MT_RETURN_IF_ERROR(check_nvme_space(plan, so.nvme));
  }
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

}  // namespace

JobRunner::JobRunner(JobSpec spec, std::string job_dir, JobHooks hooks, uint64_t device_budget, uint64_t host_budget)
    : spec_(std::move(spec)),
      job_dir_(std::move(job_dir)),
      hooks_(std::move(hooks)),
      device_budget_(device_budget),
      host_budget_(host_budget) {}

void JobRunner::log(LogLevel level, const std::string& msg) const {
  if (hooks_.on_log) hooks_.on_log(level, msg);
}

static size_t units_with_moments(const HostStore& store) {
  size_t n = 0;
  for (size_t i = 0; i < store.num_units(); ++i) n += store.has_moments(i);
  return n;
}

// Every process learns the outcome of one step of a shared checkpoint: its own error, or that
// another process failed (whose log says why).
static Status agree(Communicator& comm, const Status& mine, const std::string& what) {
  double failed = mine.ok() ? 0 : 1;
  MT_RETURN_IF_ERROR(comm.all_reduce(&failed, 1));
  if (!mine.ok()) return mine;
  if (failed > 0) return data_loss(what + ": another process failed (its log says why)");
  return Status::Ok();
}

// The sharded optimizer's checkpoint (checkpoint.h): rank 0 begins it, every process writes its
// optimizer shard, and rank 0 publishes it once all have; any failure discards it everywhere.
static Result<std::string> save_sharded_checkpoint(Communicator& comm, const std::string& root, const ModelConfig& cfg,
                                                   const HostStore& store, const TrainerState& state, int keep,
                                                   long also_keep) {
  const bool lead = comm.rank() == 0;
  MT_RETURN_IF_ERROR(agree(comm, lead ? begin_checkpoint(root, state.step) : Status::Ok(), "beginning a checkpoint"));
  Status s = agree(comm, write_optimizer_shard(root, state.step, cfg, store, comm.rank(), comm.size()),
                   "writing the optimizer shards");
  Result<std::string> dir = checkpoint_step_dir(root, state.step);
  if (s.ok() && lead)
    dir = finish_sharded_checkpoint(root, cfg, store, state, keep, comm.size(), also_keep);
  if (s.ok()) s = agree(comm, dir.status(), "publishing a checkpoint");
  if (!s.ok() && lead) discard_checkpoint(root, state.step);
  MT_RETURN_IF_ERROR(s);
  return dir;
}

// What a step shows in TensorBoard (spec.logging.tensorboard).
static Scalars tensorboard_scalars(const StepStats& st, double flops_per_token) {
  const double tps = st.tokens_per_second();
  Scalars s = {{"train/loss", st.loss},
               {"train/grad_norm", st.grad_norm},
               {"train/learning_rate", double(st.lr)},
               {"perf/tokens_per_second", tps},
               {"perf/model_tflops", tps * flops_per_token / 1e12},
               {"perf/h2d_gbps", st.h2d_bandwidth() / 1e9},
               {"perf/stall_seconds", st.stall_seconds()}};
  if (st.is_moe()) {
    s.push_back({"train/aux_loss", st.aux_loss});
    s.push_back({"moe/experts_routed_ratio", double(st.experts_routed) / double(st.experts_total)});
  }
  return s;
}

namespace {

// The run's directory, created and locked (JOB_DIR/.megatrain.lock) for this process.
Result<std::unique_ptr<FileLock>> hold_job_dir(const std::string& job_dir, const std::string& ckpt_root) {
  if (job_dir.empty()) return invalid_argument("the run's directory is empty");  // else /checkpoints
  std::error_code ec;
  std::filesystem::create_directories(ckpt_root, ec);
  if (ec) return failed_precondition("cannot create the checkpoint directory '" + ckpt_root + "': " + ec.message());
  return FileLock::acquire(job_dir + "/.megatrain.lock", "'" + job_dir + "' is in use by another training run",
                           "wait for it to end, or give this run another directory (--out)");
}

}  // namespace

Result<JobResult> JobRunner::run() {
  MT_RETURN_IF_ERROR(validate(spec_));
  MT_ASSIGN_OR_RETURN(ModelConfig cfg, resolve_model(spec_));
  MT_RETURN_IF_ERROR(check_unset_tokenizers(spec_, cfg.vocab_size));  // before any memory is taken
  MT_RETURN_IF_ERROR(check_eval_tokenizer(spec_));
  MT_ASSIGN_OR_RETURN(Nodes nodes, join_nodes(spec_));
  const std::string ckpt_root = job_dir_ + "/checkpoints";
  // Before any work: the one process that begins checkpoints holds the run's directory (two runs
  // on one --out published each other's checkpoints), and a directory it cannot write is refused
  // now, not at the first checkpoint after hours of training.
  std::unique_ptr<FileLock> held;
  if (nodes.comms().rank() == 0) {
    MT_ASSIGN_OR_RETURN(held, hold_job_dir(job_dir_, ckpt_root));
  }
  MT_ASSIGN_OR_RETURN(auto ex, make_executor(spec_, cfg, device_budget_, host_budget_, hooks_, nodes.comms()));
  // Every node holds the same model; sharded, each holds its part of the optimizer state.
  const bool sharded = nodes.weights != nullptr;
  const bool writes_checkpoints = nodes.comms().rank() == 0 || sharded;
  MT_ASSIGN_OR_RETURN(std::unique_ptr<DataSource> data, open_job_data(spec_, hooks_, cfg.vocab_size));
  std::optional<HeldOutSet> held_out;  // read once, before the first step
  if (spec_.eval.enabled) {
    MT_ASSIGN_OR_RETURN(held_out, HeldOutSet::open(spec_, cfg.vocab_size, ex->eval_batch_rows()));
    log(LogLevel::kInfo, "eval: " + held_out->describe() + ", " +
                             (spec_.eval.every > 0 ? "every " + std::to_string(spec_.eval.every) + " steps and " : "") +
                             "at the end");
  }
  if (nodes.comms().rank() == 0)  // the one process that begins checkpoints, before its first
    for (const std::string& stale : remove_stale_checkpoint_temps(ckpt_root))
      log(LogLevel::kWarning, "removed " + ckpt_root + "/" + stale + ", a checkpoint a killed run did not finish");
  std::string resumed;  // the checkpoint this run resumes from, if any
  MT_ASSIGN_OR_RETURN(TrainerState state, initialise(spec_, cfg, ckpt_root, *ex, resumed));
  const DataStart start = data_start(spec_, state, resumed, data->describe());
  if (!start.warning.empty()) log(LogLevel::kWarning, start.warning);
  state.data_cursor = start.cursor;
  MT_RETURN_IF_ERROR(data->seek(state.data_cursor));
  if (resumed.empty()) state.eval = {};  // init.from another job: its evaluations are not ours
  // A resume continues this run; init.from another run's checkpoint starts this one at its step.
  const std::string at_step = !state.step        ? ""
                              : resumed.empty() ? ", starting at step " + std::to_string(state.step) + " of " + spec_.init.from
                                                : ", resuming at step " + std::to_string(state.step);
  log(LogLevel::kInfo, "model " + cfg.architecture + " (" + std::to_string(cfg.num_params()) + " params), data " +
                           data->describe() + at_step);
  if (cfg.pad_token_id >= 0)
    log(LogLevel::kWarning, "config.json sets pad_token_id " + std::to_string(cfg.pad_token_id) +
                                ": transformers leaves that embedding row untrained (nn.Embedding padding_idx); "
                                "MegaTrain trains it like any other, so results differ where it is an input token");
  if (spec_.devices > 1 || nodes.comms().size() > 1)
    log(LogLevel::kInfo, "data parallel: process " + std::to_string(nodes.comms().rank()) + " of " +
                             std::to_string(nodes.comms().size()) + ", " + std::to_string(spec_.devices) +
                             " device(s) each, " +
                             std::to_string(spec_.train.global_batch / (spec_.devices * nodes.comms().size())) +
                             " sequences per device per step; host store " + format_bytes(ex->store().total_bytes()) +
                             (sharded ? " (optimizer sharded: Adam state of " + std::to_string(units_with_moments(ex->store())) +
                                            " of " + std::to_string(ex->store().num_units()) + " units)"
                                      : ""));
  // What computes, and a generic CPU GEMM kernel on a capable CPU loud enough to notice.
  log(LogLevel::kInfo, std::string("compute ") + precision_name(job_precision(spec_)) + " on " +
                           (uses_cuda(spec_) && spec_.executor != "resident"
                                ? "cuda (attention " + cuda_attention_kernel_name() + ")"
                                : "cpu") +
                           "; " +
                           cpu::gemm_provider_line());
  if (const std::string w = cpu::gemm_fallback_warning(); !w.empty()) log(LogLevel::kWarning, w);
  if (const std::string w = cuda_attention_warning(); uses_cuda(spec_) && !w.empty()) log(LogLevel::kWarning, w);
  state.spec_hash = job_spec_hash(spec_);
  state.spec = job_spec_hashed_json(spec_);
  state.data_source = data->describe();
  state.total_steps = spec_.steps;

  JobResult result;
  result.steps_done = state.step;
  result.final_loss = state.last_loss;  // what a run that trains no step reports
  result.checkpoint = resumed;
  // TensorBoard event files, by one process, from the step this run starts at (what a killed
  // run logged after its checkpoint is dropped: this run logs those steps again).
  std::unique_ptr<TensorBoardWriter> tb;
  if (spec_.logging.tensorboard && nodes.comms().rank() == 0) {
    auto w = TensorBoardWriter::open(job_dir_ + "/tensorboard", state.step);
    if (w.ok()) tb = std::move(*w), log(LogLevel::kInfo, "tensorboard: event files in " + job_dir_ + "/tensorboard");
    else log(LogLevel::kWarning, "tensorboard: " + w.status().message() + "; the job runs without event files");
  }
  const double flops_per_token = model_flops_per_token(cfg, spec_.train.seq_len);
  auto curve = [&](long step, const Scalars& scalars) {  // a failed write ends the event file, not the job
    if (tb && !tb->scalars(step, double(unix_ms_now()) / 1e3, scalars).ok()) {
      log(LogLevel::kWarning, "tensorboard: cannot write " + tb->path() + "; the job goes on without event files");
      tb.reset();
    }
  };
  // One process with the whole optimizer state in memory writes its periodic checkpoints while
  // the next steps train; the others write between steps. Declared after the executor: a writer
  // in flight reads the executor's store, and is waited for before that goes.
  const bool overlap = !sharded && nodes.comms().size() == 1 && !ex->store().tier();
  auto write = [&](const TrainerState& st, long best) {
    return sharded ? save_sharded_checkpoint(*nodes.losses, ckpt_root, cfg, ex->store(), st, spec_.checkpoint.keep, best)
                   : save_checkpoint(ckpt_root, cfg, ex->store(), st, spec_.checkpoint.keep, best);
  };
  const long saved_step = resumed.empty() ? -1 : state.step;  // the step of the checkpoint on disk (-1: none)
  JobCheckpoints checkpoints({ckpt_root, spec_.checkpoint.keep, writes_checkpoints, overlap, saved_step, resumed}, cfg,
                             *ex, hooks_, write, [this](LogLevel l, const std::string& m) { log(l, m); });
  auto checkpoint = [&](bool wait = true) -> Status {
    const long best = spec_.checkpoint.keep_best ? state.eval.best_step : 0;  // kept besides the last `keep`
    MT_RETURN_IF_ERROR(checkpoints.save(state, best, wait));
    if (tb) (void)tb->sync();  // the curves on disk as far as the checkpoint
    result.checkpoint = checkpoints.saved();
    return Status::Ok();
  };
  // The held-out loss of the weights after state.step steps; with keep_best, a new best is
  // checkpointed at once (and kept).
  auto evaluate = [&]() -> Status {
    MT_ASSIGN_OR_RETURN(EvalStats e, held_out->evaluate(*ex));
    const bool best = state.eval.record(state.step, e.loss());
    const EvalReport r{state.step, e.loss(), e.counted, e.seconds, best, state.eval.best_step, state.eval.best_loss};
    if (hooks_.on_eval) hooks_.on_eval(r);  // the front-ends log it, as they log steps
    curve(r.step, {{"eval/loss", r.loss}});
    if (r.best && spec_.checkpoint.keep_best) MT_RETURN_IF_ERROR(checkpoint());
    return Status::Ok();
  };
  Batch batch;
  double seconds = 0;
  long tokens = 0;
  while (state.step < spec_.steps) {
    MT_RETURN_IF_ERROR(checkpoints.poll());
    if (cancel_) {
      result.cancelled = true;
      break;
    }
    Status got = data->next_batch(spec_.train.global_batch, spec_.train.seq_len, batch);
    if (got.code() == StatusCode::kCancelled && cancel_) {  // a source waiting for data was stopped
      result.cancelled = true;
      break;
    }
    if (got.code() == StatusCode::kUnavailable) {  // no data now: checkpoint, yield or wait on
      if (checkpoint_now_.exchange(false)) MT_RETURN_IF_ERROR(checkpoint());
      result.starved = !cancel_ && hooks_.yield_when_starved && hooks_.yield_when_starved();
      if (result.starved) break;
      continue;
    }
    if (got.code() == StatusCode::kOutOfRange && spec_.data.epochs > 0) {  // data.epochs trained
      result.data_exhausted = true;
      log(LogLevel::kInfo, got.message() + "; the job ends at step " + std::to_string(state.step));
      break;
    }
    MT_RETURN_IF_ERROR(got);
    MT_ASSIGN_OR_RETURN(StepStats st, ex->step(batch));
    st.packing_efficiency = data->packing_efficiency();
    state.step = st.step;
    state.data_cursor = data->cursor();
    state.last_loss = st.loss;
    seconds += st.step_seconds;
    tokens += st.tokens;
    result.steps_run += 1;
    result.final_loss = st.loss;
    if (hooks_.on_step) hooks_.on_step(st);
    curve(st.step, tensorboard_scalars(st, flops_per_token));
    if (held_out && spec_.eval.every > 0 && state.step % spec_.eval.every == 0) MT_RETURN_IF_ERROR(evaluate());
    // Not again when the evaluation just checkpointed this step (keep_best).
    const bool periodic = spec_.checkpoint.every > 0 && state.step % spec_.checkpoint.every == 0 &&
                          state.step != checkpoints.saved_step();
    if (checkpoint_now_.exchange(false)) MT_RETURN_IF_ERROR(checkpoint());
    else if (periodic && state.step < spec_.steps) MT_RETURN_IF_ERROR(checkpoint(false));
  }
  // The end of training (not a cancel, pause or yield): the last weights evaluated, once.
  if (held_out && result.steps_run > 0 && !result.cancelled && !result.starved && state.eval.step != state.step)
    MT_RETURN_IF_ERROR(evaluate());
  MT_RETURN_IF_ERROR(checkpoint());  // final (or on cancel, or starved); none when nothing new
  result.eval = state.eval;
  result.steps_done = state.step;
  result.packing_efficiency = data->packing_efficiency();
  if (result.packing_efficiency >= 0)
    log(LogLevel::kInfo, "packing efficiency " + std::to_string(result.packing_efficiency) +
                             " (real tokens / slots over the " + std::to_string(result.steps_run) + " steps run)");
  result.tokens_per_second = seconds > 0 ? double(tokens) / seconds : 0;
  return result;
}

}  // namespace mt

#include "engine/job/job_run.h"

#include <filesystem>

#include "engine/base/hash.h"
#include "engine/base/utc_time.h"
#include "engine/job/job_data.h"
#include "engine/job/job_start.h"
#include "kernels/gemm_provider.h"

namespace mt {

namespace {

size_t units_with_moments(const HostStore& store) {
  size_t n = 0;
  for (size_t i = 0; i < store.num_units(); ++i) n += store.has_moments(i);
  return n;
}

// Every process learns the outcome of one step of a shared checkpoint: its own error, or that
// another process failed (whose log says why).
Status agree(Communicator& comm, const Status& mine, const std::string& what) {
  double failed = mine.ok() ? 0 : 1;
  MT_RETURN_IF_ERROR(comm.all_reduce(&failed, 1));
  if (!mine.ok()) return mine;
  if (failed > 0) return data_loss(what + ": another process failed (its log says why)");
  return Status::Ok();
}

// The sharded optimizer's checkpoint (checkpoint.h): rank 0 begins it, every process writes its
// optimizer shard, and rank 0 publishes it once all have; any failure discards it everywhere.
Result<std::string> save_sharded_checkpoint(Communicator& comm, const std::string& root, const ModelConfig& cfg,
                                            const HostStore& store, const TrainerState& state, int keep, long also_keep) {
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
Scalars tensorboard_scalars(const StepStats& st, double flops_per_token) {
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

JobRun::JobRun(const JobSpec& spec, const std::string& job_dir, const JobHooks& hooks, Requests requests)
    : spec_(spec), job_dir_(job_dir), ckpt_root_(job_dir + "/checkpoints"), hooks_(hooks), requests_(requests) {}

void JobRun::log(LogLevel level, const std::string& msg) const {
  if (hooks_.on_log) hooks_.on_log(level, msg);
}

Status JobRun::open(uint64_t device_budget, uint64_t host_budget) {
  MT_RETURN_IF_ERROR(validate(spec_));
  // megatraind gives the tier its --nvme_paths; a run of its own has none, and would keep it in memory
  if (spec_.offload == "nvme" && spec_.nvme.paths.empty())
    return invalid_argument("memory.offload = nvme needs memory.nvme_paths: the directories (on NVMe drives) that "
                            "hold the tier's files");
  MT_ASSIGN_OR_RETURN(cfg_, resolve_model(spec_));
  MT_RETURN_IF_ERROR(check_data_fits_model(spec_, cfg_.vocab_size));  // before any memory is taken
  MT_RETURN_IF_ERROR(check_eval_tokenizer(spec_));
  MT_ASSIGN_OR_RETURN(nodes_, join_nodes(spec_));
  // Before any work: the one process that begins checkpoints holds the run's directory (two runs
  // on one --out published each other's checkpoints), and a directory it cannot write is refused
  // now, not at the first checkpoint after hours of training.
  if (lead()) {
    MT_ASSIGN_OR_RETURN(held_, hold_job_dir(job_dir_, ckpt_root_));
  }
  MT_ASSIGN_OR_RETURN(ex_, make_executor(spec_, cfg_, device_budget, host_budget, hooks_, nodes_.comms()));
  sharded_ = nodes_.weights != nullptr;  // every node holds the model, each its part of the optimizer
  MT_ASSIGN_OR_RETURN(data_, open_job_data(spec_, hooks_, cfg_.vocab_size));
  MT_RETURN_IF_ERROR(open_held_out());
  if (lead())  // before its first checkpoint
    for (const std::string& stale : remove_stale_checkpoint_temps(ckpt_root_))
      log(LogLevel::kWarning, "removed " + ckpt_root_ + "/" + stale + ", a checkpoint a killed run did not finish");
  MT_RETURN_IF_ERROR(open_state());
  MT_RETURN_IF_ERROR(check_processes_agree());
  log_start();
  open_tensorboard();
  open_checkpoints();
  flops_per_token_ = model_flops_per_token(cfg_, spec_.train.seq_len);
  return Status::Ok();
}

// data.epochs that end the run before `steps`: the LR schedule spans `steps`, so the run would end
// near its peak rate, undecayed (a Hugging Face Trainer sizes its schedule to num_train_epochs).
// The data's rows are its first epoch's (packing lays each epoch out anew: about as many).
std::string JobRun::epochs_end_early() const {
  const TrainOptions& t = spec_.train;
  if (spec_.data.epochs <= 0 || t.schedule.decay == LrDecay::kConstant) return "";
  const uint64_t rows = data_->num_sequences(t.seq_len) * uint64_t(spec_.data.epochs);
  const uint64_t steps = (rows + uint64_t(t.global_batch) - 1) / uint64_t(t.global_batch);
  if (rows == 0 || steps >= uint64_t(spec_.steps)) return "";
  char at_end[32];
  std::snprintf(at_end, sizeof at_end, "%.2f", double(t.schedule.at(1.0f, long(steps) - 1)));
  const bool warming = steps <= uint64_t(t.schedule.warmup_steps);
  return "data.epochs " + std::to_string(spec_.data.epochs) + " ends the run after about " + std::to_string(steps) +
         " steps, before steps = " + std::to_string(spec_.steps) + ", which the " + lr_decay_name(t.schedule.decay) +
         " learning-rate schedule spans: its last step would run at " + at_end + " of the peak rate, " +
         (warming ? "still in its warmup of " + std::to_string(t.schedule.warmup_steps) + " steps; set steps and "
                                                                                        "warmup_steps to fit about "
                  : "undecayed; set steps to about ") +
         std::to_string(steps) + (warming ? " steps" : " to decay over the data");
}

// spec.eval: the held-out set, read once, before the first step.
Status JobRun::open_held_out() {
  if (!spec_.eval.enabled) return Status::Ok();
  MT_ASSIGN_OR_RETURN(held_out_, HeldOutSet::open(spec_, cfg_.vocab_size, ex_->eval_batch_rows()));
  log(LogLevel::kInfo, "eval: " + held_out_->describe() + ", " +
                           (spec_.eval.every > 0 ? "every " + std::to_string(spec_.eval.every) + " steps and " : "") +
                           "at the end");
  return Status::Ok();
}

// The run's first state (resumed, from spec.init, or fresh) and its place in the data.
Status JobRun::open_state() {
  MT_ASSIGN_OR_RETURN(const std::string tokenizer, data_tokenizer_fingerprint(spec_.data));
  MT_ASSIGN_OR_RETURN(state_, initialise(spec_, cfg_, ckpt_root_, *ex_, resumed_, tokenizer));
  if (resumed_.empty())
    if (const std::string w = initial_model_warning(spec_, cfg_); !w.empty()) log(LogLevel::kWarning, w);
  const DataStart start = data_start(spec_, state_, resumed_, data_->describe());
  if (!start.warning.empty()) log(LogLevel::kWarning, start.warning);
  state_.data_cursor = start.cursor;
  MT_RETURN_IF_ERROR(data_->seek(state_.data_cursor));
  if (lead())
    if (const std::string w = epochs_end_early(); !w.empty()) log(LogLevel::kWarning, w);
  if (resumed_.empty()) state_.eval = {};  // init.from another job: its evaluations are not ours
  state_.spec_hash = job_spec_hash(spec_);
  state_.spec = job_spec_hashed_json(spec_);
  state_.data_source = data_->describe();
  state_.tokenizer = tokenizer;
  state_.total_steps = spec_.steps;
  result_.steps_done = state_.step;
  result_.final_loss = state_.last_loss;  // what a run that trains no step reports
  result_.checkpoint = resumed_;
  return Status::Ok();
}

// Several processes train one model only from one state: the same spec, step and data position
// on each. A rank whose --out was its own (node-local) started from the seed at step 0 while
// rank 0 resumed at step 10, and their all-reduced gradients trained a wrong model that reported
// success. Each compares its fingerprint with the sum of all of them (equal on every rank only
// when all are equal; the largest differs otherwise), then all agree on the outcome.
Status JobRun::check_processes_agree() {
  Communicator* comm = nodes_.losses.get();
  if (!comm || comm->size() < 2) return Status::Ok();
  const uint64_t fp = fnv1a64(state_.spec_hash + "|" + std::to_string(state_.step) + "|" +
                              std::to_string(state_.data_cursor));
  double parts[2] = {double(fp >> 40), double(fp & ((uint64_t(1) << 40) - 1))};  // exact sums in a double
  const double mine[2] = {parts[0], parts[1]};
  MT_RETURN_IF_ERROR(comm->all_reduce(parts, 2));
  const bool same = parts[0] == mine[0] * comm->size() && parts[1] == mine[1] * comm->size();
  const Status st = same ? Status::Ok()
                         : failed_precondition("process " + std::to_string(comm->rank()) + " of " +
                                               std::to_string(comm->size()) + " starts at step " +
                                               std::to_string(state_.step) + (resumed_.empty() ? "" : " of " + resumed_) +
                                               ", spec hash " + state_.spec_hash +
                                               ", and another process from another state: every process needs the "
                                               "same spec and the same --out (a directory they share)");
  return agree(*comm, st, "the processes' starting states");
}

// What the run trains, on what data and devices, from which step; and what computes.
void JobRun::log_start() const {
  // A resume continues this run; init.from another run's checkpoint starts this one at its step;
  // a new run says whose weights it starts from.
  const std::string weights = initial_weights(spec_);
  const std::string start = !resumed_.empty() ? ", resuming at step " + std::to_string(state_.step)
                            : state_.step     ? ", starting at step " + std::to_string(state_.step) + " of " + spec_.init.from
                            : weights.empty() ? ", weights from init.seed " + std::to_string(spec_.init.seed)
                                              : ", weights from " + weights;
  log(LogLevel::kInfo, "model " + cfg_.architecture + " (" + std::to_string(cfg_.num_params()) + " params), data " +
                           data_->describe() + start);
  if (spec_.data.source == "text" && cfg_.vocab_size != 256)
    log(LogLevel::kWarning, "data.source text feeds bytes (ids 0..255) to a model of " + std::to_string(cfg_.vocab_size) +
                                " tokens: its tokenizer is not used. For the model's own ids, give the text as jsonl "
                                "lines {\"text\": ...} with data.tokenizer, or megatrain tokenize it into shards");
  if (cfg_.pad_token_id >= 0)
    log(LogLevel::kWarning, "config.json sets pad_token_id " + std::to_string(cfg_.pad_token_id) +
                                ": transformers leaves that embedding row untrained (nn.Embedding padding_idx); "
                                "MegaTrain trains it like any other, so results differ where it is an input token");
  const NodeComms nodes = nodes_.comms();
  if (spec_.devices > 1 || nodes.size() > 1)
    log(LogLevel::kInfo, "data parallel: process " + std::to_string(nodes.rank()) + " of " +
                             std::to_string(nodes.size()) + ", " + std::to_string(spec_.devices) + " device(s) each, " +
                             std::to_string(spec_.train.global_batch / (spec_.devices * nodes.size())) +
                             " sequences per device per step; host store " + format_bytes(ex_->store().total_bytes()) +
                             (sharded_ ? " (optimizer sharded: Adam state of " + std::to_string(units_with_moments(ex_->store())) +
                                             " of " + std::to_string(ex_->store().num_units()) + " units)"
                                       : ""));
  // What computes, and a generic CPU GEMM kernel on a capable CPU loud enough to notice.
  log(LogLevel::kInfo, std::string("compute ") + precision_name(job_precision(spec_)) + " on " +
                           (uses_cuda(spec_) && spec_.executor != "resident"
                                ? "cuda (attention " + cuda_attention_kernel_name() + ")"
                                : "cpu") +
                           "; " + cpu::gemm_provider_line());
  if (const std::string w = cpu::gemm_fallback_warning(); !w.empty()) log(LogLevel::kWarning, w);
  if (const std::string w = cuda_attention_warning(); uses_cuda(spec_) && !w.empty()) log(LogLevel::kWarning, w);
}

// TensorBoard event files, by one process, from the step this run starts at (what a killed run
// logged after its checkpoint is dropped: this run logs those steps again).
void JobRun::open_tensorboard() {
  if (!spec_.logging.tensorboard || !lead()) return;
  auto w = TensorBoardWriter::open(job_dir_ + "/tensorboard", state_.step);
  if (!w.ok()) return log(LogLevel::kWarning, "tensorboard: " + w.status().message() + "; the job runs without event files");
  tb_ = std::move(*w);
  log(LogLevel::kInfo, "tensorboard: event files in " + job_dir_ + "/tensorboard");
}

// A failed write (a full disk) leaves that step out of the event file, not the job: the next
// steps try again, and the log says which steps are missing once a write succeeds.
void JobRun::curve(long step, const Scalars& scalars) {
  if (!tb_) return;
  const Status st = tb_->scalars(step, double(unix_ms_now()) / 1e3, scalars);
  if (st.ok() && tb_missing_from_ > 0) {
    log(LogLevel::kInfo, "tensorboard: writing again at step " + std::to_string(step) + "; steps " +
                             std::to_string(tb_missing_from_) + ".." + std::to_string(step - 1) +
                             " are not in the event file");
    tb_missing_from_ = 0;
  } else if (!st.ok() && tb_missing_from_ == 0) {
    log(LogLevel::kWarning, "tensorboard: " + st.message() + "; step " + std::to_string(step) +
                                " and those after it are left out of the event file until a write succeeds");
    tb_missing_from_ = step;
  }
}

// One process with the whole optimizer state in memory writes its periodic checkpoints while
// the next steps train; the others write between steps.
void JobRun::open_checkpoints() {
  const bool writes = lead() || sharded_;
  const bool overlap = !sharded_ && nodes_.comms().size() == 1 && !ex_->store().tier();
  auto write = [this](const TrainerState& st, long best) {
    return sharded_ ? save_sharded_checkpoint(*nodes_.losses, ckpt_root_, cfg_, ex_->store(), st, spec_.checkpoint.keep, best)
                    : save_checkpoint(ckpt_root_, cfg_, ex_->store(), st, spec_.checkpoint.keep, best);
  };
  const long saved_step = resumed_.empty() ? -1 : state_.step;  // the step of the checkpoint on disk (-1: none)
  checkpoints_ = std::make_unique<JobCheckpoints>(
      JobCheckpoints::Options{ckpt_root_, spec_.checkpoint.keep, writes, overlap, saved_step, resumed_}, cfg_, *ex_,
      hooks_, write, [this](LogLevel l, const std::string& m) { log(l, m); });
}

Result<JobResult> JobRun::train() {
  // An evaluation a stop cut short (a pause, a preemption, Ctrl-C) is made when the run goes on.
  const long every = spec_.eval.every;
  if (held_out_ && !resumed_.empty() && every > 0 && state_.step > 0 && state_.step < spec_.steps &&
      state_.step % every == 0 && state_.eval.step != state_.step)
    MT_RETURN_IF_ERROR(evaluate());
  while (state_.step < spec_.steps) {
    MT_RETURN_IF_ERROR(checkpoints_->poll());
    MT_ASSIGN_OR_RETURN(const Next next, next_batch());
    if (next == Next::kEnd) break;
    if (next == Next::kStep) MT_RETURN_IF_ERROR(train_step());
  }
  return finish();
}

// The next step's batch into batch_; or none yet (starved: a checkpoint when one is asked for,
// and the device yielded when the daemon has another job); or the end: a cancel, data.epochs.
Result<JobRun::Next> JobRun::next_batch() {
  const bool stop = requests_.cancel;
  const Status got = stop ? Status::Ok() : data_->next_batch(spec_.train.global_batch, spec_.train.seq_len, batch_);
  if (stop || (got.code() == StatusCode::kCancelled && requests_.cancel)) {  // or a source waiting for data was stopped
    result_.cancelled = true;
    return Next::kEnd;
  }
  if (got.code() == StatusCode::kUnavailable) {
    if (requests_.checkpoint_now.exchange(false)) MT_RETURN_IF_ERROR(checkpoint());
    result_.starved = !requests_.cancel && hooks_.yield_when_starved && hooks_.yield_when_starved();
    return result_.starved ? Next::kEnd : Next::kWait;
  }
  if (got.code() == StatusCode::kOutOfRange && spec_.data.epochs > 0) {  // data.epochs trained
    result_.data_exhausted = true;
    log(LogLevel::kInfo, got.message() + "; the job ends at step " + std::to_string(state_.step));
    return Next::kEnd;
  }
  MT_RETURN_IF_ERROR(got);
  return Next::kStep;
}

// batch_ trained, told, and followed by the evaluation and checkpoint due at its step.
Status JobRun::train_step() {
  MT_ASSIGN_OR_RETURN(StepStats st, ex_->step(batch_));
  st.packing_efficiency = data_->packing_efficiency();
  state_.step = st.step;
  state_.data_cursor = data_->cursor();
  state_.last_loss = st.loss;
  seconds_ += st.step_seconds;
  tokens_ += st.tokens;
  result_.steps_run += 1;
  result_.final_loss = st.loss;
  if (hooks_.on_step) hooks_.on_step(st);
  curve(st.step, tensorboard_scalars(st, flops_per_token_));
  if (held_out_ && spec_.eval.every > 0 && state_.step % spec_.eval.every == 0) MT_RETURN_IF_ERROR(evaluate());
  // Not again when the evaluation just checkpointed this step (keep_best).
  const bool periodic = spec_.checkpoint.every > 0 && state_.step % spec_.checkpoint.every == 0 &&
                        state_.step != checkpoints_->saved_step();
  if (requests_.checkpoint_now.exchange(false)) return checkpoint();
  if (periodic && state_.step < spec_.steps) return checkpoint(false);
  return Status::Ok();
}

// The end of training (not a cancel, pause or yield): the last weights evaluated, once (also by
// a run that only goes on to make the evaluation a stop cut short); then the final checkpoint (or
// on cancel, or starved; none when nothing is new).
Result<JobResult> JobRun::finish() {
  if (held_out_ && state_.step > 0 && !result_.cancelled && !result_.starved && state_.eval.step != state_.step)
    MT_RETURN_IF_ERROR(evaluate());
  MT_RETURN_IF_ERROR(checkpoint());
  result_.eval = state_.eval;
  result_.steps_done = state_.step;
  result_.packing_efficiency = data_->packing_efficiency();
  if (result_.packing_efficiency >= 0)
    log(LogLevel::kInfo, "packing efficiency " + std::to_string(result_.packing_efficiency) +
                             " (real tokens / slots over the " + std::to_string(result_.steps_run) + " steps run)");
  result_.tokens_per_second = seconds_ > 0 ? double(tokens_) / seconds_ : 0;
  return result_;
}

Status JobRun::checkpoint(bool wait) {
  const long best = spec_.checkpoint.keep_best ? state_.eval.best_step : 0;  // kept besides the last `keep`
  MT_RETURN_IF_ERROR(checkpoints_->save(state_, best, wait));
  if (tb_) (void)tb_->sync();  // the curves on disk as far as the checkpoint
  result_.checkpoint = checkpoints_->saved();
  return Status::Ok();
}

// The held-out loss of the weights after state_.step steps; with keep_best, a new best is
// checkpointed at once (and kept).
Status JobRun::evaluate() {
  Result<EvalStats> got = held_out_->evaluate(*ex_, &requests_.cancel);
  if (got.status().code() == StatusCode::kCancelled) {  // the run stops with its checkpoint, unevaluated
    result_.cancelled = true;
    log(LogLevel::kInfo, "evaluation at step " + std::to_string(state_.step) + " cancelled");
    return Status::Ok();
  }
  MT_ASSIGN_OR_RETURN(EvalStats e, std::move(got));
  const bool best = state_.eval.record(state_.step, e.loss());
  const EvalReport r{state_.step, e.loss(), e.counted, e.seconds, best, state_.eval.best_step, state_.eval.best_loss};
  if (hooks_.on_eval) hooks_.on_eval(r);  // the front-ends log it, as they log steps
  curve(r.step, {{"eval/loss", r.loss}});
  if (lead()) MT_RETURN_IF_ERROR(checkpoints_->record_evaluation(state_));
  if (r.best && spec_.checkpoint.keep_best) MT_RETURN_IF_ERROR(checkpoint());
  return Status::Ok();
}

}  // namespace mt

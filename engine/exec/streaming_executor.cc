#include "engine/exec/streaming_executor.h"

#include <cstdio>

#include <algorithm>

#include "engine/exec/streaming_pipeline.h"
#include "engine/optim/optimizer_shards.h"

namespace mt {

namespace {

// The fields StreamingOptions and PlanOptions share, listed once, from either to the other.
template <typename To, typename From>
To shared_fields(const From& f) {
  To t;
  t.slots = f.slots;
  t.placement = f.placement;
  t.device_budget = f.device_budget;
  t.backend_bytes = f.backend_bytes;
  t.bf16_uploads = f.bf16_uploads;
  t.speculation = f.speculation;
  t.host_budget = f.host_budget;
  t.expert_slots = f.expert_slots;
  t.nvme = f.nvme;
  return t;
}

}  // namespace

StreamingOptions streaming_options(const PlanOptions& po) { return shared_fields<StreamingOptions>(po); }
PlanOptions plan_options(const StreamingOptions& so) { return shared_fields<PlanOptions>(so); }

StreamingExecutor::StreamingExecutor(const ModelConfig& cfg, const TrainOptions& opt, const StreamingOptions& so,
                                     std::unique_ptr<Backend> backend, const ReplicaOptions& ro)
    : cfg_(cfg), opt_(opt), so_(so), units_(build_param_schemas(cfg)), ro_(ro), backend_(std::move(backend)) {}

StreamingExecutor::~StreamingExecutor() {
  // The optimizer thread may still be applying the last step's updates, which read the host
  // buffers declared after pipe_: finish and join it before any member goes away.
  if (pipe_) {
    drain();  // a failed step may leave work queued that writes host buffers
    (void)pipe_->sync();
  }
  pipe_.reset();
}

void StreamingExecutor::drain() {
  for (StreamKind s : {StreamKind::kCompute, StreamKind::kD2H, StreamKind::kH2D}) backend_->host_wait(backend_->record(s));
}

Result<std::unique_ptr<StreamingExecutor>> StreamingExecutor::create_cpu(const ModelConfig& cfg, const TrainOptions& opt,
                                                                         const StreamingOptions& so) {
  CpuBackendOptions bo;
  bo.link_gbps = so.link_gbps;
  return create(cfg, opt, so, make_cpu_backend(bo));
}

Result<std::unique_ptr<StreamingExecutor>> StreamingExecutor::create(const ModelConfig& cfg, const TrainOptions& opt,
                                                                     const StreamingOptions& so,
                                                                     std::unique_ptr<Backend> backend,
                                                                     const ReplicaOptions& ro) {
  MT_RETURN_IF_ERROR(validate(opt, cfg));
  if (so.update_during_backward && opt.optimizer.grad_clip > 0)
    return invalid_argument("update_during_backward needs optimizer.grad_clip = 0 (clipping needs every gradient "
                            "before any update); grad_clip is " + std::to_string(opt.optimizer.grad_clip));
  if (!opt.recompute)
    return invalid_argument("recompute = false is not supported by the streaming executor (it keeps only layer inputs)");
  MT_RETURN_IF_ERROR(backend->supports_head_dim(cfg.head_dim));  // before anything is reserved
  MT_ASSIGN_OR_RETURN(MemoryPlan plan, so.plan ? Result<MemoryPlan>(*so.plan) : plan_memory(cfg, opt, plan_options(so)));
  if (!plan.fits) return resource_exhausted("the run does not fit: " + plan.reason);
  if (ro.comm && ro.comm->rank() > 0 && !ro.leader) return invalid_argument("a replica of rank > 0 needs its leader");
  if (ro.weights && !ro.nodes) return invalid_argument("a sharded optimizer needs the nodes' gradient communicator");
  if (ro.weights && so.update_during_backward)
    return invalid_argument("a sharded optimizer updates after the whole step's norm: update_during_backward is off");
  if (ro.comm && opt.precision == Precision::kBf16 && so.bf16_uploads == Bf16Uploads::kConvert)
    return invalid_argument("several devices need bf16_uploads = shadow: convert staging would be per device");
  if (cfg.has_experts() && (ro.comm || ro.nodes))
    return unimplemented("a mixture of experts trains on one device of one process (devices: 1): the replicas "
                         "would have to agree on every layer's routing before its experts are uploaded");
  if (cfg.has_experts() && opt.precision == Precision::kBf16 && so.bf16_uploads == Bf16Uploads::kConvert)
    return invalid_argument("a mixture of experts needs bf16_uploads = shadow (the experts upload their shadows)");
  MT_RETURN_IF_ERROR(check_nvme_tier(opt, so, ro));
  if (cfg.has_experts() && so.expert_slots < 1)
    return invalid_argument("expert_slots = " + std::to_string(so.expert_slots) + " must be >= 1");
  std::unique_ptr<StreamingExecutor> e(new StreamingExecutor(cfg, opt, so, std::move(backend), ro));
  e->plan_ = plan;
  MT_RETURN_IF_ERROR(e->allocate());
  return e;
}

// What the NVMe tier cannot do: hold a sharded optimizer's state (each process holds its own
// units' only), restore a speculative update (its copies are of memory), or keep masters that
// the uploads would read (they read the bf16 shadow, which stays in memory).
Status StreamingExecutor::check_nvme_tier(const TrainOptions& opt, const StreamingOptions& so, const ReplicaOptions& ro) {
  if (so.nvme.paths.empty()) return Status::Ok();
  if (ro.weights) return invalid_argument("the NVMe tier does not hold a sharded optimizer's state: shard_optimizer is off with it");
  if (so.speculation != Speculation::kOff && opt.optimizer.grad_clip > 0)
    return invalid_argument("speculative_updates keeps restore copies of the moments in memory: off with the NVMe tier "
                            "(with grad_clip 0 every unit updates as it lands, which the tier follows)");
  if (so.nvme.grad_window < 0 || so.nvme.grad_window > 64)
    return invalid_argument("memory.nvme_grad_window = " + std::to_string(so.nvme.grad_window) + " must be in 0..64");
  if (so.nvme.grad_window > 0 && opt.optimizer.grad_clip > 0)
    return invalid_argument("memory.nvme_grad_window needs optimizer.grad_clip = 0: with clipping every gradient is "
                            "held until the step's norm is known");
  if (so.nvme.grad_window > 0 && (ro.comm || ro.nodes))
    return invalid_argument("memory.nvme_grad_window trains on one device of one process: replicas add their "
                            "gradients into every unit's buffer");
  if (so.nvme.masters && !keeps_bf16_shadow(opt.precision, so.bf16_uploads))
    return invalid_argument("memory.nvme_masters needs precision bf16 with bf16_uploads shadow: the uploads then read "
                            "the bf16 shadow in memory, never the masters on the drives");
  return Status::Ok();
}

Status StreamingExecutor::allocate() {
  numa_ = optimizer_placement(opt_.optimizer_threads);
  if (numa_.active() && !ro_.leader)
    std::fprintf(stderr, "megatrain: optimizer: %s; the host store bound to them by update block\n", numa_.describe().c_str());
  const bool shadow = keeps_bf16_shadow(opt_.precision, so_.bf16_uploads);
  const std::vector<int> owners =
      ro_.weights ? optimizer_shard_owners(units_, ro_.nodes->size()) : std::vector<int>{};
  if (ro_.leader) {
    store_ = ro_.leader->store_;
  } else {
    MT_ASSIGN_OR_RETURN(own_store_, HostStore::create(units_, opt_.layout, shadow, backend_->host_allocator(),
                                                      owners.empty() ? MomentUnits{} : moments_of_rank(owners, ro_.nodes->rank()),
                                                      so_.nvme.paths.empty() ? nullptr : &so_.nvme, &numa_));
    store_ = own_store_.get();
  }
  if (opt_.precision == Precision::kBf16 && !shadow) {  // convert uploads
    MT_ASSIGN_OR_RETURN(host_upload_staging_, HostBuffer::allocate(backend_->host_allocator(),
                                                                   size_t(so_.slots) * plan_.slot_numel * sizeof(bf16)));
  }
  MT_RETURN_IF_ERROR(backend_->reserve_device(plan_.arena_bytes));
  const size_t e = act_bytes();
  for (int k = 0; k < so_.slots; ++k) {
    MT_ASSIGN_OR_RETURN(void* p, backend_->device_alloc(plan_.slot_numel * e));
    slots_.push_back(p);
  }
  for (int k = 0; k < 2; ++k) {  // an expert's gradient too
    MT_ASSIGN_OR_RETURN(void* p, backend_->device_alloc(std::max(plan_.slot_numel, plan_.expert_numel) * sizeof(float)));
    grad_slots_.push_back(static_cast<float*>(p));
  }
  grad_slot_free_.resize(2);
  const int ckpts = plan_.checkpoints_on_device ? cfg_.num_layers + 1 : 3;
  for (int k = 0; k < ckpts; ++k) {
    MT_ASSIGN_OR_RETURN(void* p, backend_->device_alloc(plan_.checkpoint_numel * e));
    ckpt_.push_back(p);
  }
  if (!plan_.checkpoints_on_device) {
    MT_ASSIGN_OR_RETURN(host_checkpoints_, HostBuffer::allocate(backend_->host_allocator(),
                                                                size_t(cfg_.num_layers) * plan_.checkpoint_numel * e));
    ring_holds_.assign(3, -1);
    ring_offloaded_.resize(3);
    ring_ready_.resize(3);
  }
  MT_ASSIGN_OR_RETURN(dresid_, backend_->device_alloc(plan_.checkpoint_numel * e));
  MT_ASSIGN_OR_RETURN(work_, backend_->device_alloc(plan_.workspace_bytes));
  const size_t tokens = size_t(opt_.global_batch) * size_t(opt_.seq_len);
  const size_t rows_tokens = std::max(tokens, size_t(ro_.rows_tokens));
  MT_ASSIGN_OR_RETURN(void* tok, backend_->device_alloc(3 * tokens * sizeof(int32_t)));
  inputs_ = static_cast<int32_t*>(tok);
  targets_ = inputs_ + tokens;
  positions_ = targets_ + tokens;
  const size_t micro_batches = size_t(opt_.global_batch / opt_.micro_batch);
  MT_ASSIGN_OR_RETURN(void* starts, backend_->device_alloc((tokens + micro_batches) * sizeof(int32_t)));
  device_span_starts_ = static_cast<int32_t*>(starts);
  MT_ASSIGN_OR_RETURN(void* totals, backend_->device_alloc(micro_batches * 2 * sizeof(double)));
  loss_totals_ = static_cast<double*>(totals);
  MT_ASSIGN_OR_RETURN(host_loss_, HostBuffer::allocate(backend_->host_allocator(), micro_batches * 2 * sizeof(double)));
  MT_ASSIGN_OR_RETURN(host_batch_, HostBuffer::allocate(backend_->host_allocator(), batch_staging_bytes(opt_)));
  const auto inv = rope_inv_freq(cfg_);
  MT_ASSIGN_OR_RETURN(void* inv_freq, backend_->device_alloc(inv.size() * sizeof(float)));
  inv_freq_ = static_cast<float*>(inv_freq);
  backend_->copy_h2d(inv_freq_, inv.data(), inv.size() * sizeof(float));
  backend_->host_wait(backend_->record(StreamKind::kH2D));
  shape_ = LayerShape{&cfg_, opt_.micro_batch, opt_.seq_len, inv_freq_, opt_.head_chunk, plan_.token_chunk};
  MT_RETURN_IF_ERROR(allocate_experts());

  const size_t grad_elem = state_elem_bytes(opt_.layout);
  if (cfg_.tie_word_embeddings && !ro_.leader) {  // only the leader receives gradients
    MT_ASSIGN_OR_RETURN(host_tied_grad_, HostBuffer::allocate(backend_->host_allocator(), units_[0].numel * grad_elem));
  }
  const size_t C = size_t(cfg_.hidden_size), max_rows = std::min(size_t(cfg_.vocab_size), rows_tokens);
  MT_ASSIGN_OR_RETURN(host_rows_, HostBuffer::allocate(backend_->host_allocator(), max_rows * C * sizeof(float)));
  row_of_token_.assign(size_t(cfg_.vocab_size), -1);
  PipelineConfig pc;
  pc.optimizer = opt_.optimizer;
  // A grad window holds a unit's gradient only until its update: each unit updates as it lands.
  pc.update_during_backward = so_.update_during_backward || so_.nvme.grad_window > 0;
  pc.optimizer_placement = numa_;
  pc.embedding_width = C;
  pc.precision = opt_.precision;
  pc.nodes = ro_.nodes;
  pc.owners = owners;
  pc.weights = ro_.weights;
  if (!ro_.leader) {  // only the leader's optimizer updates (data_parallel_executor.h)
    pc.update_during_backward = pc.update_during_backward || plan_.update_as_landed;
    pc.speculate.assign(units_.size(), 0);
    if (!plan_.update_as_landed)
      for (int u : speculative_units(cfg_.num_layers, plan_.speculative_units)) pc.speculate[size_t(u)] = 1;
    pc.speculate_after_clip = so_.speculation == Speculation::kOn;
  }
  pc.optimizer_slowdown = so_.optimizer_slowdown;
  const HostStaging staging{host_tied_grad_.as<void>(), host_rows_.as<void>(), host_upload_staging_.as<bf16>(),
                            plan_.slot_numel};
  std::vector<std::vector<int>> layer_experts(size_t(cfg_.num_layers));
  for (int l = 0; l < cfg_.num_layers; ++l)
    for (int e = 0; cfg_.is_moe_layer(l) && e < cfg_.moe.num_experts; ++e)
      layer_experts[size_t(l)].push_back(expert_unit(cfg_, l, e));
  pipe_ = std::make_unique<StreamingPipeline>(
      *backend_, *store_, units_, slots_,
      build_use_sequence(cfg_.num_layers, so_.slots, cfg_.tie_word_embeddings, layer_experts), pc, staging,
      ro_.leader ? ro_.leader->pipe_.get() : nullptr, expert_slots_);
  return Status::Ok();
}

// A mixture of experts' device buffers (planner.cc counts the same): the expert slots, each
// micro-batch's MoE state, their routing offsets and statistics; and on the host every MoE
// layer's offsets, twice (the forward's, the backward's recompute), and the statistics.
Status StreamingExecutor::allocate_experts() {
  if (!cfg_.has_experts()) return Status::Ok();
  const size_t E = size_t(cfg_.moe.num_experts), M = size_t(opt_.global_batch / opt_.micro_batch);
  for (int k = 0; k < plan_.expert_slots; ++k) {
    MT_ASSIGN_OR_RETURN(void* p, backend_->device_alloc(plan_.expert_numel * act_bytes()));
    expert_slots_.push_back(p);
  }
  const size_t state = opt_.precision == Precision::kBf16 ? moe_acts_bytes<bf16>(shape_) : moe_acts_bytes<float>(shape_);
  MT_ASSIGN_OR_RETURN(moe_, backend_->device_alloc(M * state));
  MT_ASSIGN_OR_RETURN(void* offsets, backend_->device_alloc(M * (E + 1) * sizeof(int32_t)));
  moe_offsets_ = static_cast<int32_t*>(offsets);
  MT_ASSIGN_OR_RETURN(void* stats, backend_->device_alloc(M * 2 * E * sizeof(float)));
  moe_stats_ = static_cast<float*>(stats);
  int index = 0;
  for (int l = 0; l < cfg_.num_layers; ++l) moe_index_.push_back(cfg_.is_moe_layer(l) ? index++ : -1);
  const size_t offsets_bytes = size_t(index) * M * (E + 1) * sizeof(int32_t);
  MT_ASSIGN_OR_RETURN(host_offsets_, HostBuffer::allocate(backend_->host_allocator(), offsets_bytes));
  MT_ASSIGN_OR_RETURN(host_recheck_, HostBuffer::allocate(backend_->host_allocator(), offsets_bytes));
  MT_ASSIGN_OR_RETURN(host_moe_stats_, HostBuffer::allocate(backend_->host_allocator(), M * 2 * E * sizeof(float)));
  return Status::Ok();
}

void StreamingExecutor::set_steps_done(long steps) {
  steps_ = steps;
  pipe_->mark_all_updated(steps);
}

Status StreamingExecutor::sync() {
  MT_RETURN_IF_ERROR(pipe_->sync());
  return backend_->error();
}

EmbeddingRows StreamingExecutor::embedding_rows(const std::vector<int32_t>& inputs) {
  auto rows = std::make_shared<std::vector<int32_t>>();
  for (int32_t t : inputs) row_of_token_[size_t(t)] = 0;  // mark
  for (int32_t t = 0; t < cfg_.vocab_size; ++t)
    if (row_of_token_[size_t(t)] == 0) {
      row_of_token_[size_t(t)] = -1;  // reset for the next call
      rows->push_back(t);
    }
  return rows;
}

void StreamingExecutor::map_to_rows(const std::vector<int32_t>& inputs, const std::vector<int32_t>& rows) {
  for (size_t r = 0; r < rows.size(); ++r) row_of_token_[size_t(rows[r])] = int32_t(r);
  row_ids_.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) row_ids_[i] = row_of_token_[size_t(inputs[i])];
  for (int32_t t : rows) row_of_token_[size_t(t)] = -1;
}

std::vector<double> StreamingExecutor::micro_batch_loss_sums() const {
  const double* totals = host_loss_.as<double>();
  std::vector<double> sums;
  for (int m = 0; m < opt_.global_batch / opt_.micro_batch; ++m) sums.push_back(totals[2 * m]);
  return sums;
}

double StreamingExecutor::read_loss_sum() {
  backend_->host_wait(loss_landed_);
  double sum = 0;
  for (double s : micro_batch_loss_sums()) sum += s;  // micro-batch order
  return sum;
}

// The step's tokens to the device. The compute stream waits for them on the device; the host
// buffers stay untouched until step() returns, which is after that compute has run.
void StreamingExecutor::upload_batch(const Batch& batch) {
  // inputs_/targets_ are overwritten only once the previous step's compute (its embedding
  // backward reads inputs_) is done: on CUDA the H2D stream does not otherwise wait for it.
  // The staging (pinned where the backend pins) is rewritten here only: the previous step's copies
  // from it ran before that step's compute, which step() returned after.
  backend_->stream_wait(StreamKind::kH2D, backend_->record(StreamKind::kCompute));
  const size_t tokens = batch.inputs.size();
  int32_t* staged = host_batch_.as<int32_t>();
  auto upload = [&](int32_t* device, const int32_t* host, size_t n) {
    std::copy(host, host + n, staged);
    backend_->copy_h2d(device, staged, n * sizeof(int32_t));
    staged += n;
  };
  upload(inputs_, row_ids_.data(), tokens);
  upload(targets_, batch.targets.data(), tokens);
  has_positions_ = !batch.positions.empty();
  if (has_positions_) {
    upload(positions_, batch.positions.data(), tokens);
    make_spans(batch);
    upload(device_span_starts_, span_starts_.data(), span_starts_.size());
  }
  timeline_.wait(backend_->record(StreamKind::kH2D));
}

// Each micro-batch's documents as spans, starts relative to the micro-batch (b*T + t); upload_batch
// uploads span_starts_ to device_span_starts_.
void StreamingExecutor::make_spans(const Batch& batch) {
  const size_t n = size_t(shape_.N()), micro_batches = batch.positions.size() / n;
  span_starts_.clear();
  span_starts_.reserve(batch.positions.size() + micro_batches);  // the most there can be: the spans point into it
  spans_.assign(micro_batches, DocumentSpans{});
  for (size_t m = 0; m < micro_batches; ++m) {
    const size_t first = span_starts_.size();
    const auto st = document_starts(batch.positions.data() + m * n, shape_.B, shape_.T);
    span_starts_.insert(span_starts_.end(), st.begin(), st.end());
    if (!st.empty()) spans_[m] = {span_starts_.data() + first, device_span_starts_ + first, int(st.size()) - 1};
  }
}

LayerShape StreamingExecutor::micro_batch_shape(int m) const {
  LayerShape s = shape_;
  s.pos = has_positions_ ? positions_ + size_t(m) * size_t(s.N()) : nullptr;
  s.spans = has_positions_ && spans_[size_t(m)].count > 0 ? &spans_[size_t(m)] : nullptr;
  return s;
}

// Timings from the streams' own clocks (the step's compute has run), byte counts, the update.
void StreamingExecutor::fill_stats(StepStats& st) {
  const ComputeTimeline::Totals t = timeline_.take();
  st.step_seconds = t.step;
  st.compute_seconds = t.compute;
  st.forward_compute_seconds = t.forward_compute;
  st.copy_wait_seconds = t.copy_wait;
  st.optimizer_wait_seconds = t.optimizer_wait;
  const CopyStats cs = backend_->take_copy_stats();
  st.h2d_bytes = cs.h2d_bytes;
  st.d2h_bytes = cs.d2h_bytes;
  st.h2d_seconds = cs.h2d_seconds;
  st.d2h_seconds = cs.d2h_seconds;
  st.optimizer_seconds = pipe_->take_optimizer_seconds();
  // The leader's optimizer saw the step's gradients; a follower's step reports none (the
  // data-parallel step takes the leader's), and so never waits on a leader that failed.
  st.grad_norm = ro_.leader ? 0.0 : pipe_->grad_norm_of(st.step);
  st.clipped = clip_factor(st.grad_norm, opt_.optimizer.grad_clip) != 1.0f;
  st.device_peak_bytes = backend_->device_peak();
}

Result<StepStats> StreamingExecutor::step(const Batch& batch) {
  MT_RETURN_IF_ERROR(check_step_batch(batch, opt_, cfg_.vocab_size));  // before its tokens index anything
  return step_shard(batch, embedding_rows(batch.inputs), batch.counted_targets());
}

Result<StepStats> StreamingExecutor::step_shard(const Batch& batch, EmbeddingRows rows, long counted) {
  // Sticky: the device or the group failed in an earlier step. A replica that will not join this
  // step's collectives says so, so that the others fail now instead of at their timeout.
  Status ready = backend_->error();
  if (ready.ok()) ready = comm_error_;
  if (!ready.ok() && ro_.comm) ro_.comm->abort(ready);
  MT_RETURN_IF_ERROR(ready);
  StepStats st = step_stats_for(batch, opt_, steps_);  // step() or the data-parallel step checked the batch
  timeline_.begin_step();
  grad_scale_ = counted > 0 ? 1.0f / float(counted) : 0.0f;
  map_to_rows(batch.inputs, *rows);
  st.embedding_rows = long(rows->size());
  pipe_->begin_step(st.step, st.lr, std::move(rows));
  upload_batch(batch);
  if (cfg_.has_experts())  // the step's load-balancing statistics add up over its MoE layers
    backend_->ops<float>().zero(moe_stats_, size_t(opt_.global_batch / opt_.micro_batch) * 2 * size_t(cfg_.moe.num_experts));
  if (opt_.precision == Precision::kBf16) run_uses<bf16>(st);
  else run_uses<float>(st);
  // The head finished long before the backward now queued behind it: this wait leaves the
  // compute stream busy. A device fault comes first (the totals are then suspect).
  const double loss_sum = read_loss_sum();
  st.loss = counted > 0 ? loss_sum / double(counted) : 0.0;
  Status verdict = backend_->error();
  if (verdict.ok()) verdict = check_step_loss(st.step, st.loss);
  // Before the embedding's gradient (the step's last) is enqueued, so no update of this step starts.
  pipe_->refuse_update(verdict);
  timeline_.begin_busy(false);
  if (opt_.precision == Precision::kBf16) backward_embedding<bf16>(st);
  else backward_embedding<float>(st);
  timeline_.end_busy();
  // step() returns when the step's compute has run (the next step's batch upload waits for it
  // anyway), so a device fault is reported by the step it happened in.
  const EventPtr done = timeline_.end_step();
  pipe_->end_step(done);
  backend_->host_wait(done);
  ++steps_;  // begun in the pipeline: a failed step is not run again under the same number
  MT_RETURN_IF_ERROR(backend_->error());
  MT_RETURN_IF_ERROR(comm_error_);
  // This step's refused loss, or an earlier step's non-finite gradient norm: the optimizer
  // finished that step's update phase before this step's weights were uploaded.
  MT_RETURN_IF_ERROR(pipe_->error());
  MT_RETURN_IF_ERROR(check_recomputed_routing());
  fill_stats(st);
  fill_moe_stats(st);
  return st;
}

}  // namespace mt

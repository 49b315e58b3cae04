#include "engine/exec/resident_executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
#include <type_traits>

#include "engine/model/init.h"

namespace mt {

void init_weights(const ModelConfig& cfg, HostStore& store, uint64_t seed) {
  const auto units = build_param_schemas(cfg);
  ThreadPool pool(0);  // every CPU: a 7 B model's init took minutes on one
  store.zero_optimizer_state(/*masters_follow=*/true, &pool);
  for (size_t u = 0; u < units.size(); ++u)  // one pass over the NVMe tier (its error is sticky: the first step reports it)
    (void)store.with_master(u, true, [&](float* master) {
      init_unit_weights(cfg, units[u], master, seed, &pool);
      if (bf16* shadow = store.unit(u).shadow) round_to_bf16_on(pool, shadow, master, units[u].numel);
      return Status::Ok();
    });
  store.zero_grads(&pool);
}

namespace {
// The pass's inputs, targets and document positions from the batch's token `first` on.
template <typename T>
void point_at(const Batch& batch, size_t first, ModelPassArgs<T>& a, LayerShape& s) {
  a.inputs = batch.inputs.data() + first;
  a.targets = batch.targets.data() + first;
  s.pos = batch.positions.empty() ? nullptr : batch.positions.data() + first;
}
}  // namespace

ResidentExecutor::ResidentExecutor(const ModelConfig& cfg, const TrainOptions& opt)
    : cfg_(cfg),
      opt_(opt),
      units_(build_param_schemas(cfg)),
      numa_(optimizer_placement(opt.optimizer_threads)),
      pool_(numa_),
      inv_freq_(rope_inv_freq(cfg)) {}

Result<std::unique_ptr<ResidentExecutor>> ResidentExecutor::create(const ModelConfig& cfg, const TrainOptions& opt,
                                                                   int devices) {
  MT_RETURN_IF_ERROR(validate(opt, cfg));
  MT_RETURN_IF_ERROR(check_devices(devices, opt));
  if (opt.layout != MemoryLayout::kExact)
    return invalid_argument("memory.layout = compact is not supported by the resident executor (use streaming)");
  std::unique_ptr<ResidentExecutor> e(new ResidentExecutor(cfg, opt));
  const bool bf16_compute = opt.precision == Precision::kBf16;
  MT_ASSIGN_OR_RETURN(e->store_, HostStore::create(e->units_, MemoryLayout::kExact, bf16_compute,
                                                   default_host_allocator(), {}, nullptr, &e->numa_));
  LayerShape s{&e->cfg_, opt.micro_batch, opt.seq_len, e->inv_freq_.data(), opt.head_chunk, opt.token_chunk};
  const size_t ws = bf16_compute ? model_pass_workspace_bytes<bf16>(s, opt.recompute)
                                 : model_pass_workspace_bytes<float>(s, opt.recompute);
  e->devices_.resize(size_t(devices));
  for (size_t d = 0; d < e->devices_.size(); ++d) {
    Device& dev = e->devices_[d];
    for (size_t u = 0; u < e->units_.size(); ++u) {
      if (d > 0) dev.own_grads.emplace_back(e->units_[u].numel);
      dev.grads.push_back(d > 0 ? dev.own_grads[u].data() : static_cast<float*>(e->store_->unit(u).grad));
    }
    if (cfg.tie_word_embeddings) dev.tied_head_grad.resize(e->units_[0].numel);
    dev.workspace.resize(ws);
  }
  return e;
}

uint64_t ResidentExecutor::host_bytes() const {
  uint64_t b = store_->total_bytes();
  for (const Device& d : devices_) {
    for (const auto& g : d.own_grads) b += g.size() * sizeof(float);
    b += d.tied_head_grad.size() * sizeof(float) + d.workspace.bytes();
  }
  return b;
}

template <typename T>
std::vector<const T*> ResidentExecutor::weights() const {
  std::vector<const T*> w;
  for (size_t u = 0; u < units_.size(); ++u) {
    if constexpr (std::is_same_v<T, bf16>) w.push_back(store_->unit(u).shadow);
    else w.push_back(store_->unit(u).master);
  }
  return w;
}

template <typename T>
Status ResidentExecutor::accumulate_shard(int d, const Batch& batch, float grad_scale) {
  Device& dev = devices_[size_t(d)];
  for (size_t u = 0; u < units_.size(); ++u) std::fill_n(dev.grads[u], units_[u].numel, 0.0f);
  std::fill(dev.tied_head_grad.begin(), dev.tied_head_grad.end(), 0.0f);
  LayerShape s{&cfg_, opt_.micro_batch, opt_.seq_len, inv_freq_.data(), opt_.head_chunk, opt_.token_chunk};
  ModelPassArgs<T> a;
  a.weights = weights<T>();
  a.grads = dev.grads;
  a.tied_head_grad = dev.tied_head_grad.empty() ? nullptr : dev.tied_head_grad.data();
  a.grad_scale = grad_scale;
  a.recompute = opt_.recompute;
  a.micro_batches = opt_.global_batch / opt_.micro_batch;
  dev.routed.assign(units_.size(), 0);
  dev.aux_loss = 0;
  a.routed = &dev.routed;
  a.aux_loss = &dev.aux_loss;
  const size_t mb_tokens = size_t(opt_.micro_batch) * opt_.seq_len;
  const int per = opt_.global_batch / opt_.micro_batch / devices();  // micro-batches per device
  dev.loss_sums.clear();
  for (int mb = d * per; mb < (d + 1) * per; ++mb) {
    point_at(batch, size_t(mb) * mb_tokens, a, s);
    MT_ASSIGN_OR_RETURN(auto r, model_pass(cpu_ops<T>(), s, a, dev.workspace.data(), dev.workspace.bytes()));
    dev.loss_sums.push_back(r.loss_sum);
  }
  return Status::Ok();
}

Status ResidentExecutor::run_devices(const Batch& batch, float grad_scale) {
  const bool bf16_compute = opt_.precision == Precision::kBf16;
  auto run = [&](int d) {
    return bf16_compute ? accumulate_shard<bf16>(d, batch, grad_scale) : accumulate_shard<float>(d, batch, grad_scale);
  };
  std::vector<Status> got(devices_.size());
  std::vector<std::thread> threads;
  for (int d = 1; d < devices(); ++d) threads.emplace_back([&, d] { got[size_t(d)] = run(d); });
  got[0] = run(0);
  for (auto& t : threads) t.join();
  for (int d = 0; d < devices(); ++d) {
    const Status& s = got[size_t(d)];
    if (!s.ok()) return devices() > 1 ? s.with_context("device " + std::to_string(d)) : s;
  }
  return Status::Ok();
}

void ResidentExecutor::reduce_devices() {
  Device& first = devices_[0];
  pool_.parallel_for(int(units_.size()), [&](int u) {
    float* g = first.grads[size_t(u)];
    for (size_t d = 1; d < devices_.size(); ++d) {
      const float* o = devices_[d].grads[size_t(u)];
      for (size_t i = 0; i < units_[size_t(u)].numel; ++i) g[i] += o[i];
    }
  });
  std::vector<float>& tied = first.tied_head_grad;
  for (size_t d = 1; d < devices_.size(); ++d)
    for (size_t i = 0; i < tied.size(); ++i) tied[i] += devices_[d].tied_head_grad[i];
  // Tied embeddings: d(embedding) = the LM head's share + the lookup's share.
  float* gemb = first.grads[0];
  for (size_t i = 0; i < tied.size(); ++i) gemb[i] = tied[i] + gemb[i];
}

Result<StepStats> ResidentExecutor::step(const Batch& batch) {
  MT_ASSIGN_OR_RETURN(StepStats st, open_step(batch, opt_, cfg_.vocab_size, steps_));
  const auto t0 = std::chrono::steady_clock::now();
  const long counted = batch.counted_targets();
  const float scale = counted > 0 ? 1.0f / float(counted) : 0.0f;

  MT_RETURN_IF_ERROR(run_devices(batch, scale));
  reduce_devices();
  double loss_sum = 0;  // per micro-batch in global order, as one device sums them
  for (const Device& d : devices_)
    for (double s : d.loss_sums) loss_sum += s;
  st.loss = counted > 0 ? loss_sum / double(counted) : 0.0;
  MT_RETURN_IF_ERROR(check_step_loss(st.step, st.loss));
  routed_.assign(units_.size(), 0);
  for (const Device& d : devices_)
    for (size_t u = 0; u < units_.size(); ++u) routed_[u] |= d.routed[u];
  if (cfg_.has_experts()) {
    st.aux_loss = 0;
    for (const Device& d : devices_) st.aux_loss += d.aux_loss;  // each micro-batch's, over their count
    st.aux_loss /= double(opt_.global_batch / opt_.micro_batch);
    for (size_t u = 0; u < units_.size(); ++u)
      if (units_[u].kind == UnitKind::kExpert) st.experts_routed += routed_[u], ++st.experts_total;
  }
  const auto t1 = std::chrono::steady_clock::now();
  st.compute_seconds = std::chrono::duration<double>(t1 - t0).count();
  MT_ASSIGN_OR_RETURN(st.grad_norm, clip_and_update(st.step, st.lr, st));
  st.clipped = clip_factor(st.grad_norm, opt_.optimizer.grad_clip) != 1.0f;
  ++steps_;
  st.step_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

Result<double> ResidentExecutor::clip_and_update(long step, float lr, StepStats& st) {
  const auto t0 = std::chrono::steady_clock::now();
  double sumsq = 0;
  std::vector<double> unit_sumsq(units_.size());
  for (size_t u = 0; u < units_.size(); ++u) {
    unit_sumsq[u] = unit_grad_sumsq(pool_, units_[u], static_cast<const float*>(store_->unit(u).grad));
    sumsq += unit_sumsq[u];
  }
  const double norm = std::sqrt(sumsq);
  MT_RETURN_IF_ERROR(check_grad_norm(step, norm, unit_sumsq, units_));
  cpu::AdamWParams p{lr, opt_.optimizer.beta1, opt_.optimizer.beta2, opt_.optimizer.eps,
                     opt_.optimizer.weight_decay, clip_factor(norm, opt_.optimizer.grad_clip), steps_ + 1};
  for (size_t u = 0; u < units_.size(); ++u) {
    if (units_[u].kind == UnitKind::kExpert && !routed_[u]) continue;  // no token, no gradient: no update
    p.step = store_->adam_step(u, steps_ + 1);
    store_->before_update(u);  // a checkpoint in flight has written it
    adamw_unit(pool_, units_[u], store_->state<float>(u), p);
    store_->count_update(u);
  }
  st.optimizer_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return norm;
}

template <typename T>
Result<EvalStats> ResidentExecutor::evaluate_in(const Batch& batch) {
  const auto t0 = std::chrono::steady_clock::now();
  LayerShape s{&cfg_, opt_.micro_batch, opt_.seq_len, inv_freq_.data(), opt_.head_chunk, opt_.token_chunk};
  Workspace& ws = devices_[0].workspace;  // sized for this shape's training pass, a superset
  ModelPassArgs<T> a;
  a.weights = weights<T>();
  a.recompute = opt_.recompute;
  const size_t mb_tokens = size_t(s.N());
  EvalStats e;
  for (int mb = 0; mb < batch.num_seqs / opt_.micro_batch; ++mb) {
    point_at(batch, size_t(mb) * mb_tokens, a, s);
    MT_ASSIGN_OR_RETURN(auto r, model_pass(cpu_ops<T>(), s, a, ws.data(), ws.bytes()));
    e.loss_sum += r.loss_sum;
    e.counted += r.counted;
  }
  e.tokens = long(batch.inputs.size());
  e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return e;
}

Result<EvalStats> ResidentExecutor::evaluate(const Batch& batch) {
  MT_RETURN_IF_ERROR(check_eval_batch(batch, opt_, eval_batch_rows(), cfg_.vocab_size));
  MT_ASSIGN_OR_RETURN(EvalStats e, opt_.precision == Precision::kBf16 ? evaluate_in<bf16>(batch) : evaluate_in<float>(batch));
  MT_RETURN_IF_ERROR(check_eval_loss(e));
  return e;
}

template <typename T>
Result<double> ResidentExecutor::mean_loss_in(const Batch& batch) {
  LayerShape s{&cfg_, 1, batch.seq_len, inv_freq_.data(), opt_.head_chunk, opt_.token_chunk};
  Workspace ws(model_pass_workspace_bytes<T>(s, false));
  ModelPassArgs<T> a;
  a.weights = weights<T>();
  double loss_sum = 0;
  long counted = 0;
  for (int g = 0; g < batch.num_seqs; ++g) {
    point_at(batch, size_t(g) * size_t(batch.seq_len), a, s);
    MT_ASSIGN_OR_RETURN(auto r, model_pass(cpu_ops<T>(), s, a, ws.data(), ws.bytes()));
    loss_sum += r.loss_sum;
    counted += r.counted;
  }
  if (counted == 0) return invalid_argument("evaluation batch has no counted targets");
  const double loss = loss_sum / double(counted);
  if (!std::isfinite(loss))
    return failed_precondition("the evaluation loss is not finite: the model's weights hold non-finite values "
                               "or overflow");
  return loss;
}

Result<double> ResidentExecutor::mean_loss(const Batch& batch) {
  MT_RETURN_IF_ERROR(validate_batch(batch, cfg_.vocab_size));
  return opt_.precision == Precision::kBf16 ? mean_loss_in<bf16>(batch) : mean_loss_in<float>(batch);
}

}  // namespace mt

#include "engine/exec/resident_executor.h"

#include <chrono>
#include <cmath>
#include <type_traits>

#include "engine/model/init.h"
#include "engine/exec/model_pass.h"

namespace mt {

void init_weights(const ModelConfig& cfg, HostStore& store, uint64_t seed) {
  const auto units = build_param_schemas(cfg);
  for (size_t u = 0; u < units.size(); ++u) {
    init_unit_weights(cfg, units[u], store.unit(u).master, seed);
  }
  store.refresh_shadows();
  store.zero_optimizer_state();
  store.zero_grads();
}

ResidentExecutor::ResidentExecutor(const ModelConfig& cfg, const TrainOptions& opt)
    : cfg_(cfg), opt_(opt), units_(build_param_schemas(cfg)), pool_(opt.optimizer_threads), inv_freq_(rope_inv_freq(cfg)) {}

Result<std::unique_ptr<ResidentExecutor>> ResidentExecutor::create(const ModelConfig& cfg, const TrainOptions& opt) {
  MT_RETURN_IF_ERROR(validate(opt, cfg));
  if (opt.layout != MemoryLayout::kExact)
    return invalid_argument("memory.layout = compact is not supported by the resident executor (use streaming)");
  std::unique_ptr<ResidentExecutor> e(new ResidentExecutor(cfg, opt));
  const bool bf16_compute = opt.precision == Precision::kBf16;
  MT_ASSIGN_OR_RETURN(e->store_, HostStore::create(e->units_, MemoryLayout::kExact, bf16_compute, default_host_allocator()));
  LayerShape s{&e->cfg_, opt.micro_batch, opt.seq_len, e->inv_freq_.data(), opt.head_chunk, opt.token_chunk};
  e->workspace_.resize(bf16_compute ? model_pass_workspace_bytes<bf16>(s, opt.recompute)
                                    : model_pass_workspace_bytes<float>(s, opt.recompute));
  if (cfg.tie_word_embeddings) e->tied_head_grad_.resize(e->units_[0].numel);
  return e;
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
Result<double> ResidentExecutor::accumulate_grads(const Batch& batch, float grad_scale) {
  LayerShape s{&cfg_, opt_.micro_batch, opt_.seq_len, inv_freq_.data(), opt_.head_chunk, opt_.token_chunk};
  ModelPassArgs<T> a;
  a.weights = weights<T>();
  for (size_t u = 0; u < units_.size(); ++u) a.grads.push_back(static_cast<float*>(store_->unit(u).grad));
  a.tied_head_grad = tied_head_grad_.empty() ? nullptr : tied_head_grad_.data();
  a.grad_scale = grad_scale;
  a.recompute = opt_.recompute;
  double loss_sum = 0;
  const size_t mb_tokens = size_t(opt_.micro_batch) * opt_.seq_len;
  for (int mb = 0; mb < opt_.global_batch / opt_.micro_batch; ++mb) {
    a.inputs = batch.inputs.data() + mb * mb_tokens;
    a.targets = batch.targets.data() + mb * mb_tokens;
    s.pos = batch.positions.empty() ? nullptr : batch.positions.data() + mb * mb_tokens;
    MT_ASSIGN_OR_RETURN(auto r, model_pass(cpu_ops<T>(), s, a, workspace_.data(), workspace_.bytes()));
    loss_sum += r.loss_sum;
  }
  return loss_sum;
}

Result<StepStats> ResidentExecutor::step(const Batch& batch) {
  MT_ASSIGN_OR_RETURN(StepStats st, open_step(batch, opt_, cfg_.vocab_size, steps_));
  const auto t0 = std::chrono::steady_clock::now();
  const long counted = batch.counted_targets();
  const float scale = counted > 0 ? 1.0f / float(counted) : 0.0f;

  store_->zero_grads();
  std::fill(tied_head_grad_.begin(), tied_head_grad_.end(), 0.0f);
  MT_ASSIGN_OR_RETURN(const double loss_sum, opt_.precision == Precision::kBf16 ? accumulate_grads<bf16>(batch, scale)
                                                                                 : accumulate_grads<float>(batch, scale));
  // Tied embeddings: d(embedding) = the LM head's share + the lookup's share.
  float* gemb = static_cast<float*>(store_->unit(0).grad);
  for (size_t i = 0; i < tied_head_grad_.size(); ++i) gemb[i] = tied_head_grad_[i] + gemb[i];
  st.loss = counted > 0 ? loss_sum / double(counted) : 0.0;
  MT_RETURN_IF_ERROR(check_step_loss(st.step, st.loss));
  const auto t1 = std::chrono::steady_clock::now();
  st.compute_seconds = std::chrono::duration<double>(t1 - t0).count();
  MT_ASSIGN_OR_RETURN(st.grad_norm, clip_and_update(st.step, st.lr, st));
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
  for (size_t u = 0; u < units_.size(); ++u) adamw_unit(pool_, units_[u], store_->state<float>(u), p);
  st.optimizer_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return norm;
}

template <typename T>
Result<double> ResidentExecutor::evaluate_in(const Batch& batch) {
  LayerShape s{&cfg_, 1, batch.seq_len, inv_freq_.data(), opt_.head_chunk, opt_.token_chunk};
  Workspace ws(model_pass_workspace_bytes<T>(s, false));
  ModelPassArgs<T> a;
  a.weights = weights<T>();
  double loss_sum = 0;
  long counted = 0;
  for (int g = 0; g < batch.num_seqs; ++g) {
    a.inputs = batch.inputs.data() + size_t(g) * batch.seq_len;
    a.targets = batch.targets.data() + size_t(g) * batch.seq_len;
    s.pos = batch.positions.empty() ? nullptr : batch.positions.data() + size_t(g) * batch.seq_len;
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

Result<double> ResidentExecutor::evaluate(const Batch& batch) {
  MT_RETURN_IF_ERROR(validate_batch(batch, cfg_.vocab_size));
  return opt_.precision == Precision::kBf16 ? evaluate_in<bf16>(batch) : evaluate_in<float>(batch);
}

}  // namespace mt

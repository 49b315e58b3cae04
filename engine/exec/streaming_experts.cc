// The StreamingExecutor's mixture-of-experts layers: a layer's decoder unit runs for every
// micro-batch of the step first (layer-major), so its router has chosen every token's experts
// before any expert crosses the link; the routing comes to the host (it sizes the experts'
// GEMMs and says which to upload), and only the experts that received tokens are uploaded, run
// for every micro-batch while resident, and send back a gradient. The backward recomputes the
// decoder's forward for every micro-batch (the experts' input), runs each routed expert's
// backward, then the decoder's own backward micro-batch by micro-batch (recomputed again except
// for the micro-batch whose activations are still held) — the operations, in the order, of the
// resident pass (model_pass.cc), so the two agree bit for bit.
#include <algorithm>

#include "engine/exec/streaming_executor.h"
#include "engine/exec/streaming_pipeline.h"

namespace mt {

int32_t* StreamingExecutor::host_offsets(int l, bool recheck) const {
  const size_t per_layer = size_t(opt_.global_batch / opt_.micro_batch) * size_t(cfg_.moe.num_experts + 1);
  return (recheck ? host_recheck_ : host_offsets_).as<int32_t>() + size_t(moe_index_[size_t(l)]) * per_layer;
}

template <typename T>
MoeActs<T> StreamingExecutor::moe_acts(int l, int m, bool forward) const {
  const size_t E = size_t(cfg_.moe.num_experts);
  const int micro_batches = opt_.global_batch / opt_.micro_batch;
  MoeActs<T> a = bind_moe_acts<T>(shape_, static_cast<char*>(moe_) + size_t(m) * moe_acts_bytes<T>(shape_));
  a.offsets = moe_offsets_ + size_t(m) * (E + 1);
  a.host_offsets = host_offsets(l, false) + size_t(m) * (E + 1);
  float* stats = moe_stats_ + size_t(m) * 2 * E;
  a.stats = forward ? stats : nullptr;
  a.counts = forward || cfg_.moe.aux_coef == 0 ? nullptr : stats;
  a.aux_scale = float(moe_aux_scale(shape_, micro_batches));
  return a;
}

namespace {
// Routing offsets as moe_sort writes them: from 0, rising, to every slot of the micro-batch.
bool valid_offsets(const int32_t* o, int E, int slots) {
  if (o[0] != 0 || o[E] != slots) return false;
  for (int e = 0; e < E; ++e)
    if (o[e + 1] < o[e]) return false;
  return true;
}
}  // namespace

std::vector<int> StreamingExecutor::receive_routing(int l, int32_t* host, bool publish) {
  const int E = cfg_.moe.num_experts, micro_batches = opt_.global_batch / opt_.micro_batch;
  backend_->stream_wait(StreamKind::kD2H, backend_->record(StreamKind::kCompute));
  backend_->copy_d2h(host, moe_offsets_, size_t(micro_batches) * size_t(E + 1) * sizeof(int32_t));
  const EventPtr landed = backend_->record(StreamKind::kD2H);
  if (!publish) {  // the backward's recompute: checked at the step's end
    // The next layer's recompute rewrites the device's offsets: not before this copy has read
    // them (without this wait the check saw the next layer's routing now and then, on the CPU).
    backend_->stream_wait(StreamKind::kCompute, landed);
    return {};
  }
  const EventPtr from = timeline_.mark();  // the device idles until the host has the routing
  backend_->host_wait(landed);
  timeline_.stall_until(from, timeline_.mark());
  std::vector<int> experts, units;
  bool valid = backend_->error().ok();
  for (int m = 0; valid && m < micro_batches; ++m)
    valid = valid_offsets(host + size_t(m) * size_t(E + 1), E, shape_.N() * cfg_.moe.top_k);
  for (int e = 0; valid && e < E; ++e) {
    long n = 0;
    for (int m = 0; m < micro_batches; ++m) n += host[size_t(m) * size_t(E + 1) + size_t(e) + 1] - host[size_t(m) * size_t(E + 1) + size_t(e)];
    if (n > 0) experts.push_back(e), units.push_back(expert_unit(cfg_, l, e));
  }
  if (!valid) {  // a failed device: nothing routed, nothing applied; the step reports the fault
    pipe_->refuse_update(internal_error("the routing of layer " + std::to_string(l) + " did not reach the host intact"));
    for (int m = 0; m < micro_batches; ++m) std::fill_n(host + size_t(m) * size_t(E + 1), E + 1, 0);
  }
  pipe_->set_routing(l, units);
  return experts;
}

template <typename T>
void StreamingExecutor::forward_moe(int use, int l) {
  const int micro_batches = opt_.global_batch / opt_.micro_batch;
  const size_t act = size_t(shape_.N()) * size_t(cfg_.hidden_size);
  prepare_output(l + 1);
  const T* in = layer_input<T>(l);
  T* out = layer_input<T>(l + 1);
  const Ops<T>& ops = backend_->ops<T>();
  const auto w = bind_decoder<const T>(cfg_, l, pipe_->slot_of<T>(use));
  const auto acts = bind_decoder_acts<T>(shape_, work_);
  for (int m = 0; m < micro_batches; ++m) {
    const MoeActs<T> a = moe_acts<T>(l, m, true);
    decoder_forward(ops, micro_batch_shape(m), l, w, in + size_t(m) * act, out + size_t(m) * act, acts, &a);
  }
  offload_layer_input(l);
  const auto sc = bind_decoder_scratch<T>(shape_, static_cast<char*>(work_) + decoder_acts_bytes<T>(shape_)).expert;
  for (int e : receive_routing(l, host_offsets(l, false), true)) {
    const int i = use + 1 + e;  // the layer's expert uses follow its own, expert by expert
    pipe_->wait_ready(i, timeline_);
    const auto ew = bind_expert<const T>(cfg_, pipe_->slot_of<T>(i));
    for (int m = 0; m < micro_batches; ++m) {
      const MoeActs<T> a = moe_acts<T>(l, m, true);
      if (expert_tokens(a, e) > 0) expert_forward(ops, micro_batch_shape(m), e, ew, a, out + size_t(m) * act, sc);
    }
    pipe_->release(i);
  }
}

template <typename T>
void StreamingExecutor::backward_moe(int use, int l) {
  const int micro_batches = opt_.global_batch / opt_.micro_batch, E = cfg_.moe.num_experts;
  const size_t act = size_t(shape_.N()) * size_t(cfg_.hidden_size);
  fetch_layer_input(l);
  if (!plan_.checkpoints_on_device && ring_ready_[size_t(l % 3)]) timeline_.wait(ring_ready_[size_t(l % 3)]);
  fetch_layer_input(l - 1);  // prefetch the next layer's input while this one computes
  const T* in = layer_input<T>(l);
  const Ops<T>& ops = backend_->ops<T>();
  const auto w = bind_decoder<const T>(cfg_, l, pipe_->slot_of<T>(use));
  const auto acts = bind_decoder_acts<T>(shape_, work_);
  const auto sc = bind_decoder_scratch<T>(shape_, static_cast<char*>(work_) + decoder_acts_bytes<T>(shape_));
  T* dresid = static_cast<T*>(dresid_);
  // The experts' input (and the routing, again) for every micro-batch, the last first: the
  // decoder's activations of micro-batch 0 are then the ones left in acts, where its backward
  // below takes them without a second recompute (the micro-batches are independent here).
  for (int m = micro_batches - 1; m >= 0; --m) {
    const MoeActs<T> a = moe_acts<T>(l, m, false);
    decoder_forward<T>(ops, micro_batch_shape(m), l, w, in + size_t(m) * act, nullptr, acts, &a);
    ops.zero(a.din, act);
  }
  (void)receive_routing(l, host_offsets(l, true), false);
  const int32_t* routing = host_offsets(l, false);  // the forward's
  for (int e = 0; e < E; ++e) {
    long n = 0;
    for (int m = 0; m < micro_batches; ++m) n += routing[size_t(m) * size_t(E + 1) + size_t(e) + 1] - routing[size_t(m) * size_t(E + 1) + size_t(e)];
    if (n == 0) continue;
    const int i = use + 1 + e, u = expert_unit(cfg_, l, e);
    pipe_->wait_ready(i, timeline_);
    const size_t numel = units_[size_t(u)].numel;
    const int g = acquire_grad_slot(numel);
    const auto ew = bind_expert<const T>(cfg_, pipe_->slot_of<T>(i));
    const auto dew = bind_expert<float>(cfg_, grad_slots_[size_t(g)]);
    for (int m = 0; m < micro_batches; ++m) {
      const MoeActs<T> a = moe_acts<T>(l, m, false);
      if (expert_tokens(a, e) > 0)
        expert_backward(ops, micro_batch_shape(m), e, ew, dew, a, dresid + size_t(m) * act, sc.expert);
    }
    send_grads(u, g, numel, GradShare::kUnit);
    pipe_->release(i);
  }
  // The decoder unit's own backward, micro-batch by micro-batch. Micro-batch 0's activations are
  // still in `acts` from the experts' input pass (it ran last): everything since wrote only the
  // scratch after the activations' region (work_ + decoder_acts_bytes), the MoE state slots and
  // dresid. Anything that writes into `acts` between the two must drop this shortcut.
  const size_t n = units_[size_t(l) + 1].numel;
  const int g = acquire_grad_slot(n);
  const auto dw = bind_decoder<float>(cfg_, l, grad_slots_[size_t(g)]);
  for (int m = 0; m < micro_batches; ++m) {
    const T* x = in + size_t(m) * act;
    const LayerShape s = micro_batch_shape(m);
    const MoeActs<T> a = moe_acts<T>(l, m, false);
    if (m > 0) decoder_forward<T>(ops, s, l, w, x, nullptr, acts, &a);  // recompute (0's are in acts)
    decoder_backward(ops, s, l, w, dw, x, acts, dresid + size_t(m) * act, sc, &a);
  }
  send_grads(l + 1, g, n, GradShare::kUnit);
}

// The backward recomputed every router's choice from the same inputs with the same kernels: it
// must be the forward's (whose offsets sized the experts' work and their uploads).
Status StreamingExecutor::check_recomputed_routing() {
  if (!cfg_.has_experts()) return Status::Ok();
  backend_->host_wait(backend_->record(StreamKind::kD2H));
  const size_t per_layer = size_t(opt_.global_batch / opt_.micro_batch) * size_t(cfg_.moe.num_experts + 1);
  for (int l = 0; l < cfg_.num_layers; ++l)
    if (cfg_.is_moe_layer(l) && !std::equal(host_offsets(l, false), host_offsets(l, false) + per_layer, host_offsets(l, true)))
      return internal_error("layer " + std::to_string(l) + "'s router chose other experts in the backward's recompute "
                      "than in the forward (a nondeterministic kernel?)");
  return Status::Ok();
}

// The step's load-balancing loss and routing (engine_stats.h), once its compute has run.
void StreamingExecutor::fill_moe_stats(StepStats& st) {
  if (!cfg_.has_experts()) return;
  const int micro_batches = opt_.global_batch / opt_.micro_batch, E = cfg_.moe.num_experts;
  backend_->host_wait(moe_stats_landed_);
  const float* stats = host_moe_stats_.as<float>();
  st.aux_loss = 0;
  for (int m = 0; m < micro_batches; ++m) {
    const std::vector<double> s(stats + size_t(m) * 2 * size_t(E), stats + size_t(m + 1) * 2 * size_t(E));
    st.aux_loss += moe_aux_loss(shape_, s.data()) / micro_batches;
  }
  const uint64_t elem = act_bytes();
  for (int l = 0; l < cfg_.num_layers; ++l) {
    if (!cfg_.is_moe_layer(l)) continue;
    const int32_t* o = host_offsets(l, false);
    long max_load = 0, total = 0;
    for (int e = 0; e < E; ++e) {
      long n = 0;
      for (int m = 0; m < micro_batches; ++m) n += o[size_t(m) * size_t(E + 1) + size_t(e) + 1] - o[size_t(m) * size_t(E + 1) + size_t(e)];
      const uint64_t bytes = 2 * units_[size_t(expert_unit(cfg_, l, e))].numel * elem;  // forward and backward
      st.dense_expert_h2d_bytes += bytes;
      ++st.experts_total;
      if (n > 0) st.expert_h2d_bytes += bytes, ++st.experts_routed;
      max_load = std::max(max_load, n);
      total += n;
    }
    st.expert_load.push_back(total > 0 ? double(max_load) * E / double(total) : 0.0);
  }
}

template MoeActs<float> StreamingExecutor::moe_acts<float>(int, int, bool) const;
template MoeActs<bf16> StreamingExecutor::moe_acts<bf16>(int, int, bool) const;
template void StreamingExecutor::forward_moe<float>(int, int);
template void StreamingExecutor::forward_moe<bf16>(int, int);
template void StreamingExecutor::backward_moe<float>(int, int);
template void StreamingExecutor::backward_moe<bf16>(int, int);

}  // namespace mt

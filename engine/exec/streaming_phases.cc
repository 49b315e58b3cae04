// The StreamingExecutor's per-unit work: every micro-batch through one resident unit, layer
// inputs kept (or offloaded and fetched back), gradients accumulated in a device slot and sent
// to the host when the unit is done.
#include "engine/exec/streaming_executor.h"
#include "engine/exec/streaming_pipeline.h"

namespace mt {

namespace {
struct MicroBatches {
  int count;
  size_t tokens;  // per micro-batch
  size_t act;     // elements of one micro-batch's [tokens, C] slice
};
MicroBatches micro_batches(const TrainOptions& o, const ModelConfig& c) {
  const size_t t = size_t(o.micro_batch) * size_t(o.seq_len);
  return {o.global_batch / o.micro_batch, t, t * size_t(c.hidden_size)};
}
}  // namespace

void StreamingExecutor::prepare_output(int l) {
  if (plan_.checkpoints_on_device) return;
  const size_t k = size_t(l % 3);
  if (ring_offloaded_[k]) timeline_.wait(ring_offloaded_[k]);  // the buffer's offload has run
  ring_holds_[k] = l;
}

void StreamingExecutor::offload_layer_input(int l) {
  if (plan_.checkpoints_on_device) return;
  const size_t k = size_t(l % 3), n = plan_.checkpoint_numel;
  backend_->stream_wait(StreamKind::kD2H, backend_->record(StreamKind::kCompute));
  backend_->copy_d2h(host_checkpoints_.as<char>() + size_t(l) * n * act_bytes(), ckpt_[k], n * act_bytes());
  ring_offloaded_[k] = last_offload_ = backend_->record(StreamKind::kD2H);
}

void StreamingExecutor::fetch_layer_input(int l) {
  const size_t k = size_t(l % 3), n = plan_.checkpoint_numel;
  if (plan_.checkpoints_on_device || l < 0 || ring_holds_[k] == l) return;
  backend_->stream_wait(StreamKind::kH2D, backend_->record(StreamKind::kCompute));  // ring buffer's last reader
  if (last_offload_) backend_->stream_wait(StreamKind::kH2D, last_offload_);        // x_l has reached the host
  backend_->copy_h2d(ckpt_[k], host_checkpoints_.as<char>() + size_t(l) * n * act_bytes(), n * act_bytes());
  ring_ready_[k] = backend_->record(StreamKind::kH2D);
  ring_holds_[k] = l;
}

template <typename T>
void StreamingExecutor::forward_embedding(int use) {
  const MicroBatches mb = micro_batches(opt_, cfg_);
  prepare_output(0);
  T* out = layer_input<T>(0);
  for (int m = 0; m < mb.count; ++m)
    embedding_forward(backend_->ops<T>(), shape_, pipe_->slot_of<T>(use), inputs_ + size_t(m) * mb.tokens,
                      out + size_t(m) * mb.act);
}

template <typename T>
void StreamingExecutor::forward_decoder(int use, int l) {
  const MicroBatches mb = micro_batches(opt_, cfg_);
  prepare_output(l + 1);
  const T* in = layer_input<T>(l);
  T* out = layer_input<T>(l + 1);
  const auto w = bind_decoder<const T>(cfg_, l, pipe_->slot_of<T>(use));
  const auto acts = bind_decoder_acts<T>(shape_, work_);
  for (int m = 0; m < mb.count; ++m)
    decoder_forward(backend_->ops<T>(), micro_batch_shape(m), l, w, in + size_t(m) * mb.act, out + size_t(m) * mb.act,
                    acts);
  offload_layer_input(l);
}

template <typename T>
void StreamingExecutor::head(int use, int tied_use) {
  const MicroBatches mb = micro_batches(opt_, cfg_);
  const int L = cfg_.num_layers, C = cfg_.hidden_size;
  const T* w = pipe_->slot_of<T>(use);
  const T* lm = tied_use >= 0 ? pipe_->slot_of<T>(tied_use) : w + C;
  const size_t n = units_[size_t(L) + 1].numel;
  const int g = acquire_grad_slot(n);
  const int gt = tied_use >= 0 ? acquire_grad_slot(units_[0].numel) : -1;
  float* dlm = gt >= 0 ? grad_slots_[size_t(gt)] : grad_slots_[size_t(g)] + C;
  const auto sc = head_scratch<T>();
  const T* x = layer_input<T>(L);
  T* dresid = static_cast<T*>(dresid_);
  for (int m = 0; m < mb.count; ++m)
    head_forward_backward(backend_->ops<T>(), shape_, w, lm, grad_slots_[size_t(g)], dlm, x + size_t(m) * mb.act,
                          targets_ + size_t(m) * mb.tokens, grad_scale_, dresid + size_t(m) * mb.act, sc,
                          loss_totals_ + 2 * size_t(m));
  // The totals go to the host once per step, not once per micro-batch.
  backend_->stream_wait(StreamKind::kD2H, backend_->record(StreamKind::kCompute));
  backend_->copy_d2h(host_loss_.as<void>(), loss_totals_, size_t(mb.count) * 2 * sizeof(double));
  loss_landed_ = backend_->record(StreamKind::kD2H);
  if (cfg_.has_experts()) {  // the forward's load-balancing statistics (the backward only reads them)
    backend_->copy_d2h(host_moe_stats_.as<void>(), moe_stats_, size_t(mb.count) * 2 * size_t(cfg_.moe.num_experts) * sizeof(float));
    moe_stats_landed_ = backend_->record(StreamKind::kD2H);
  }
  send_grads(L + 1, g, n, GradShare::kUnit);
  if (gt >= 0) send_grads(0, gt, units_[0].numel, GradShare::kTiedHead);
}

template <typename T>
void StreamingExecutor::backward_decoder(int use, int l) {
  const MicroBatches mb = micro_batches(opt_, cfg_);
  fetch_layer_input(l);
  if (!plan_.checkpoints_on_device && ring_ready_[size_t(l % 3)]) timeline_.wait(ring_ready_[size_t(l % 3)]);
  fetch_layer_input(l - 1);  // prefetch the next layer's input while this one computes
  const T* in = layer_input<T>(l);
  const auto w = bind_decoder<const T>(cfg_, l, pipe_->slot_of<T>(use));
  const size_t n = units_[size_t(l) + 1].numel;
  const int g = acquire_grad_slot(n);
  const auto dw = bind_decoder<float>(cfg_, l, grad_slots_[size_t(g)]);
  const auto acts = bind_decoder_acts<T>(shape_, work_);
  const auto sc = bind_decoder_scratch<T>(shape_, static_cast<char*>(work_) + decoder_acts_bytes<T>(shape_));
  T* dresid = static_cast<T*>(dresid_);
  for (int m = 0; m < mb.count; ++m) {
    const T* x = in + size_t(m) * mb.act;
    const LayerShape s = micro_batch_shape(m);
    decoder_forward<T>(backend_->ops<T>(), s, l, w, x, nullptr, acts);  // recompute
    decoder_backward(backend_->ops<T>(), s, l, w, dw, x, acts, dresid + size_t(m) * mb.act, sc);
  }
  send_grads(l + 1, g, n, GradShare::kUnit);
}

// The gradient of the step's embedding rows only, packed as the forward read them: every
// other row of d(embedding) is zero, and the optimizer thread scatters these into place.
template <typename T>
void StreamingExecutor::backward_embedding(StepStats& st) {
  const MicroBatches mb = micro_batches(opt_, cfg_);
  const size_t n = size_t(st.embedding_rows) * size_t(cfg_.hidden_size);
  const int g = acquire_grad_slot(n);
  T* dresid = static_cast<T*>(dresid_);
  for (int m = 0; m < mb.count; ++m)
    embedding_backward(backend_->ops<T>(), shape_, grad_slots_[size_t(g)], inputs_ + size_t(m) * mb.tokens,
                       dresid + size_t(m) * mb.act);
  send_grads(0, g, n, GradShare::kEmbeddingRows);
  st.last_grad_bytes = n * state_elem_bytes(opt_.layout);
}

// Enqueues the step's unit uses in order (forward, head, backward L..1).
template <typename T>
void StreamingExecutor::run_uses(StepStats& st) {
  const int L = cfg_.num_layers;
  const auto& uses = pipe_->uses();
  for (int i = 0; i < int(uses.size()); ++i) {
    const UnitUse& use = uses[size_t(i)];
    // The embedding's use by the LM head is taken with the head's; an expert's with its layer's.
    if (use.tied_lm || use.expert) continue;
    const int u = use.unit;
    const bool forward = !use.backward, tied = cfg_.tie_word_embeddings, is_head = u == L + 1;
    const bool moe = u >= 1 && u <= L && cfg_.is_moe_layer(u - 1);
    if (is_head && tied) pipe_->wait_ready(i - 1, timeline_);
    pipe_->wait_ready(i, timeline_);
    timeline_.begin_busy(forward);
    if (is_head) head<T>(i, tied ? i - 1 : -1);
    else if (forward && u == 0) forward_embedding<T>(i);
    else if (forward) moe ? forward_moe<T>(i, u - 1) : forward_decoder<T>(i, u - 1);
    else moe ? backward_moe<T>(i, u - 1) : backward_decoder<T>(i, u - 1);
    timeline_.end_busy();
    if (is_head) st.forward_h2d_bytes = pipe_->fetch_bytes(0, i);
    if (is_head && tied) pipe_->release(i - 1);
    pipe_->release(i);
  }
}

template void StreamingExecutor::run_uses<float>(StepStats&);
template void StreamingExecutor::run_uses<bf16>(StepStats&);
template void StreamingExecutor::backward_embedding<float>(StepStats&);
template void StreamingExecutor::backward_embedding<bf16>(StepStats&);

int StreamingExecutor::acquire_grad_slot(size_t numel) {
  const int k = next_grad_slot_;
  next_grad_slot_ = (k + 1) % int(grad_slots_.size());
  if (grad_slot_free_[size_t(k)]) timeline_.wait(grad_slot_free_[size_t(k)]);  // its gradient reached the host
  backend_->ops<float>().zero(grad_slots_[size_t(k)], numel);
  return k;
}

bool StreamingExecutor::reduce_grads(int k, size_t numel) {
  if (!ro_.comm) return true;
  Status s = comm_error_.ok() ? ro_.comm->reduce(grad_slots_[size_t(k)], numel, 0, {backend_.get(), StreamKind::kCompute})
                              : comm_error_;
  if (!s.ok() && comm_error_.ok()) {
    comm_error_ = s;
    ro_.comm->abort(s);                 // the others fail now, not at their timeout
    if (!ro_.leader) pipe_->refuse_update(s);  // the leader applies no update from this step
  }
  // The leader sends even after a failure (its update is refused), so the pipeline's bookkeeping
  // completes and nothing waits for a gradient that never comes.
  if (ro_.comm->rank() == 0) return true;
  grad_slot_free_[size_t(k)] = backend_->record(StreamKind::kCompute);
  return false;
}

void StreamingExecutor::send_grads(int unit, int k, size_t numel, GradShare share) {
  if (!reduce_grads(k, numel)) return;
  backend_->stream_wait(StreamKind::kD2H, backend_->record(StreamKind::kCompute));
  const float* src = grad_slots_[size_t(k)];
  void* dst = share == GradShare::kTiedHead        ? host_tied_grad_.as<void>()
              : share == GradShare::kEmbeddingRows ? host_rows_.as<void>()
                                                   : store_->take_grad(size_t(unit));  // waits for a grad window's buffer
  if (opt_.layout == MemoryLayout::kExact) backend_->copy_d2h(dst, src, numel * sizeof(float));
  else backend_->copy_d2h_bf16(static_cast<bf16*>(dst), src, numel);
  EventPtr landed = backend_->record(StreamKind::kD2H);
  grad_slot_free_[size_t(k)] = landed;
  pipe_->grads_sent(unit, landed, share == GradShare::kTiedHead);
}

}  // namespace mt

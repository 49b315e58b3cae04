// The StreamingExecutor's held-out evaluation (Executor::evaluate): a forward pass between
// steps, layer-major like a step's forward — every micro-batch through each unit while it is
// resident — with the weight slots, two of the layer-input buffers, the workspace and the loss
// totals the step itself uses, so device memory stays exactly the plan. No gradient, no update:
// the head computes the loss only. Uploads run ahead of the compute by up to K - 1 units.
#include <algorithm>

#include "engine/exec/streaming_executor.h"

namespace mt {

namespace {
struct EvalUse {
  int unit;
  bool rows_only;  // the embedding's forward: only the batch's rows, packed
};
// Embedding rows, decoders 1..L, the embedding whole when the head is tied to it, the head.
std::vector<EvalUse> eval_sequence(int L, bool tied) {
  std::vector<EvalUse> seq{{0, true}};
  for (int u = 1; u <= L; ++u) seq.push_back({u, false});
  if (tied) seq.push_back({0, false});
  seq.push_back({L + 1, false});
  return seq;
}
}  // namespace

template <typename T>
Status StreamingExecutor::eval_uses(int count, const EmbeddingRows& rows) {
  const int L = cfg_.num_layers, K = int(slots_.size()), C = cfg_.hidden_size;
  const std::vector<EvalUse> seq = eval_sequence(L, cfg_.tie_word_embeddings);
  const int n = int(seq.size());
  std::vector<EventPtr> ready(static_cast<size_t>(n)), released(static_cast<size_t>(K));
  auto upload = [&](int j) -> Status {
    const EvalUse& u = seq[size_t(j)];
    MT_ASSIGN_OR_RETURN(ready[size_t(j)], pipe_->upload_between_steps(j % K, u.unit, u.rows_only ? rows.get() : nullptr,
                                                                       released[size_t(j % K)]));
    return Status::Ok();
  };
  for (int j = 0; j < std::min(K, n); ++j) MT_RETURN_IF_ERROR(upload(j));
  const size_t tokens = size_t(shape_.N()), act = tokens * size_t(C);
  auto x = [&](int l) { return static_cast<T*>(ckpt_[size_t(l % 2)]); };  // x_l: two buffers suffice
  const auto acts = bind_decoder_acts<T>(shape_, work_);
  const auto sc = head_scratch<T>();
  const Ops<T>& ops = backend_->ops<T>();
  for (int i = 0; i < n; ++i) {
    timeline_.wait(ready[size_t(i)]);
    timeline_.begin_busy(true);
    const T* w = static_cast<const T*>(slots_[size_t(i % K)]);
    const int u = seq[size_t(i)].unit;
    if (seq[size_t(i)].rows_only) {
      for (int m = 0; m < count; ++m) embedding_forward(ops, shape_, w, inputs_ + size_t(m) * tokens, x(0) + size_t(m) * act);
    } else if (u >= 1 && u <= L && cfg_.is_moe_layer(u - 1)) {
      MT_RETURN_IF_ERROR(eval_moe<T>(u - 1, count, w, x(u - 1), x(u)));
    } else if (u >= 1 && u <= L) {
      for (int m = 0; m < count; ++m)
        decoder_forward(ops, micro_batch_shape(m), u - 1, bind_decoder<const T>(cfg_, u - 1, w), x(u - 1) + size_t(m) * act,
                        x(u) + size_t(m) * act, acts);
    } else if (u == L + 1) {
      const T* lm = cfg_.tie_word_embeddings ? static_cast<const T*>(slots_[size_t((i - 1) % K)]) : w + C;
      for (int m = 0; m < count; ++m)
        head_forward_backward<T>(ops, shape_, w, lm, nullptr, nullptr, x(L) + size_t(m) * act, targets_ + size_t(m) * tokens,
                                 0, nullptr, sc, loss_totals_ + 2 * size_t(m));
    }  // else: the whole embedding, resident for the tied head that follows
    timeline_.end_busy();
    released[size_t(i % K)] = backend_->record(StreamKind::kCompute);
    if (i + K < n) MT_RETURN_IF_ERROR(upload(i + K));
  }
  backend_->stream_wait(StreamKind::kD2H, backend_->record(StreamKind::kCompute));
  backend_->copy_d2h(host_loss_.as<void>(), loss_totals_, size_t(count) * 2 * sizeof(double));
  loss_landed_ = backend_->record(StreamKind::kD2H);
  return Status::Ok();
}

// An MoE layer in the evaluation: its decoder unit for every micro-batch, then each routed
// expert, uploaded between steps into the expert slots in turn, for every micro-batch.
template <typename T>
Status StreamingExecutor::eval_moe(int l, int count, const T* w, const T* in, T* out) {
  const size_t act = size_t(shape_.N()) * size_t(cfg_.hidden_size);
  const Ops<T>& ops = backend_->ops<T>();
  const auto acts = bind_decoder_acts<T>(shape_, work_);
  auto moe = [&](int m) {
    MoeActs<T> a = moe_acts<T>(l, m, true);
    a.stats = nullptr;  // not training: no load-balancing statistics
    return a;
  };
  for (int m = 0; m < count; ++m) {
    const MoeActs<T> a = moe(m);
    decoder_forward(ops, micro_batch_shape(m), l, bind_decoder<const T>(cfg_, l, w), in + size_t(m) * act,
                    out + size_t(m) * act, acts, &a);
  }
  int32_t* host = host_offsets(l, false);
  (void)receive_routing(l, host, false);
  backend_->host_wait(backend_->record(StreamKind::kD2H));
  MT_RETURN_IF_ERROR(backend_->error());  // the offsets are read only from a healthy device
  const auto sc = bind_decoder_scratch<T>(shape_, static_cast<char*>(work_) + decoder_acts_bytes<T>(shape_)).expert;
  std::vector<EventPtr> released(expert_slots_.size());
  for (int e = 0, k = 0; e < cfg_.moe.num_experts; ++e) {
    long n = 0;
    for (int m = 0; m < count; ++m) n += expert_tokens(moe(m), e);
    if (n == 0) continue;
    const int slot = k++ % int(expert_slots_.size());
    MT_ASSIGN_OR_RETURN(EventPtr ready, pipe_->upload_expert_between_steps(slot, expert_unit(cfg_, l, e), released[size_t(slot)]));
    timeline_.wait(ready);
    const auto ew = bind_expert<const T>(cfg_, static_cast<const T*>(expert_slots_[size_t(slot)]));
    for (int m = 0; m < count; ++m) {
      const MoeActs<T> a = moe(m);
      if (expert_tokens(a, e) > 0) expert_forward(ops, micro_batch_shape(m), e, ew, a, out + size_t(m) * act, sc);
    }
    released[size_t(slot)] = backend_->record(StreamKind::kCompute);
  }
  return Status::Ok();
}

Result<EvalStats> StreamingExecutor::evaluate(const Batch& batch) {
  if (ro_.leader) return failed_precondition("a replica other than the leader does not evaluate: its leader does");
  MT_RETURN_IF_ERROR(check_eval_batch(batch, opt_, eval_batch_rows(), cfg_.vocab_size));
  MT_RETURN_IF_ERROR(sync());  // every update so far applied (or its refusal reported)
  MT_RETURN_IF_ERROR(comm_error_);
  (void)backend_->take_copy_stats();  // the last step's were taken with its stats: none since
  timeline_.begin_step();
  const EmbeddingRows rows = embedding_rows(batch.inputs);
  map_to_rows(batch.inputs, *rows);
  upload_batch(batch);
  const int count = batch.num_seqs / opt_.micro_batch;
  const Status run = opt_.precision == Precision::kBf16 ? eval_uses<bf16>(count, rows) : eval_uses<float>(count, rows);
  // Finished on the device before the next step, whose uploads refill the slots without waiting.
  const EventPtr done = timeline_.end_step();
  backend_->host_wait(done);
  if (!plan_.checkpoints_on_device) std::fill(ring_holds_.begin(), ring_holds_.end(), -1);  // x_0, x_1 overwritten
  MT_RETURN_IF_ERROR(run);
  MT_RETURN_IF_ERROR(backend_->error());
  backend_->host_wait(loss_landed_);
  EvalStats e;
  const double* totals = host_loss_.as<double>();
  for (int m = 0; m < count; ++m) {  // micro-batch order, as the resident executor sums
    e.loss_sum += totals[2 * m];
    e.counted += long(totals[2 * m + 1]);
  }
  e.tokens = long(batch.inputs.size());
  e.seconds = timeline_.take().step;
  e.h2d_bytes = backend_->take_copy_stats().h2d_bytes;
  MT_RETURN_IF_ERROR(check_eval_loss(e));
  return e;
}

}  // namespace mt

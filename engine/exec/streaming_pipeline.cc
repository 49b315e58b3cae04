#include "engine/exec/streaming_pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "engine/exec/executor.h"

namespace mt {

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

std::vector<UnitUse> build_use_sequence(int L, int K, bool tied, const std::vector<std::vector<int>>& layer_experts) {
  struct Entry {
    int unit;
    bool backward, tied_lm, expert;
  };
  auto experts = [&](int l, bool backward, std::vector<Entry>& out) {
    if (size_t(l) < layer_experts.size())
      for (int u : layer_experts[size_t(l)]) out.push_back({u, backward, false, true});
  };
  std::vector<Entry> order;
  for (int u = 0; u <= L; ++u) {  // forward: embedding, decoders (each followed by its experts)
    order.push_back({u, false, false, false});
    if (u >= 1) experts(u - 1, false, order);
  }
  if (tied) order.push_back({0, false, true, false});  // the LM head reads the embedding
  order.push_back({L + 1, false, false, false});       // final norm + head
  // Backward, layers L..1 (each with its experts, within the layer's use). The embedding's
  // backward scatters gradients into a zeroed slot and never reads the weights, so it is not a
  // use: the executor runs it after the sequence.
  for (int u = L; u >= 1; --u) {
    order.push_back({u, true, false, false});
    experts(u - 1, true, order);
  }
  std::vector<int> content(size_t(K), -1), last(size_t(K), -1);
  std::vector<UnitUse> uses;
  for (int i = 0; i < int(order.size()); ++i) {
    const Entry& o = order[size_t(i)];
    UnitUse use;
    use.unit = o.unit;
    use.backward = o.backward;
    use.tied_lm = o.tied_lm;
    use.expert = o.expert;
    if (o.expert) {  // its slot is taken when it is uploaded, if it is
      use.slot = -1;
      uses.push_back(use);
      continue;
    }
    int k = -1;
    for (int s = 0; s < K; ++s)
      if (content[size_t(s)] == use.unit) k = s;
    use.fetch = k < 0;
    if (k < 0) {  // refill the least recently used slot
      k = 0;
      for (int s = 1; s < K; ++s)
        if (last[size_t(s)] < last[size_t(k)]) k = s;
    }
    use.slot = k;
    use.prev_of_slot = last[size_t(k)];
    use.rows_only = i == 0;  // the embedding's forward reads only the batch's rows
    content[size_t(k)] = use.rows_only ? -1 : use.unit;  // packed rows: not reusable as the unit
    last[size_t(k)] = i;
    uses.push_back(use);
  }
  return uses;
}

uint64_t StreamingPipeline::fetch_bytes(int first, int last) const {
  uint64_t bytes = 0;
  for (int i = first; i <= last; ++i)
    if (uses_[size_t(i)].rows_only) bytes += rows_->size() * cfg_.embedding_width * elem_bytes();
    else if (uses_[size_t(i)].expert && use_slot_[size_t(i)] < 0) continue;  // no token: not uploaded
    else if (uses_[size_t(i)].fetch) bytes += units_[size_t(uses_[size_t(i)].unit)].numel * elem_bytes();
  return bytes;
}

StreamingPipeline::StreamingPipeline(Backend& backend, HostStore& store, const std::vector<ParamSchema>& units,
                                     std::vector<void*> slots, std::vector<UnitUse> uses, const PipelineConfig& cfg,
                                     const HostStaging& staging, StreamingPipeline* leader,
                                     std::vector<void*> expert_slots)
    : backend_(backend),
      store_(store),
      leader_(leader),
      units_(units),
      slots_(std::move(slots)),
      expert_slots_(std::move(expert_slots)),
      uses_(std::move(uses)),
      cfg_(cfg),
      staging_(staging),
      pool_(cfg.optimizer_placement),
      staged_(slots_.size()),
      ready_(uses_.size()),
      released_(uses_.size()),
      opt_ready_time_(uses_.size()),
      updated_(units.size(), 0),
      sumsq_(units.size()) {
  if (cfg_.nodes && store_.layout() != MemoryLayout::kExact) node_grad_.resize(staging_.slot_numel);
  for (size_t u = 0; u < units.size(); ++u)  // embedding, decoders each followed by its experts, head
    if (units[u].kind != UnitKind::kExpert && units[u].kind != UnitKind::kHead) {
      update_order_.push_back(u);
      for (size_t e = 0; units[u].kind == UnitKind::kDecoder && e < units.size(); ++e)
        if (units[e].kind == UnitKind::kExpert && units[e].layer == units[u].layer) update_order_.push_back(e);
    }
  for (size_t u = 0; u < units.size(); ++u)
    if (units[u].kind == UnitKind::kHead) update_order_.push_back(u);
  if (!leader_) {  // what the NVMe tier reads ahead in, and a checkpoint in flight writes in
    std::vector<size_t> order = update_order_;  // as it lands, during backward: last layer first
    if (cfg_.update_during_backward) std::reverse(order.begin(), order.end());
    store_.set_update_order(order);
  }
  use_slot_.assign(uses_.size(), -1);
  expert_slot_last_.assign(expert_slots_.size(), -1);
  speculated_at_.assign(units.size(), 0);
  restore_.resize(units.size());
  const size_t se = state_elem_bytes(store_.layout());
  for (size_t u = 1; u < units.size() && cfg_.owners.empty() && !cfg_.update_during_backward; ++u)
    if (u < cfg_.speculate.size() && cfg_.speculate[u])  // uninitialised: touched by its first copy
      restore_[u].reset(new char[units[u].numel * (sizeof(float) + 2 * se)]);
  uploader_ = std::thread([this] { uploader_loop(); });
  optimizer_ = std::thread([this] { optimizer_loop(); });
  if (!cfg_.owners.empty()) broadcaster_ = std::thread([this] { broadcaster_loop(); });
}

StreamingPipeline::~StreamingPipeline() {
  stopping_ = true;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  uploader_.join();
  optimizer_.join();
  if (broadcaster_.joinable()) broadcaster_.join();
}

void StreamingPipeline::begin_step(long step, float lr, EmbeddingRows rows) {
  std::lock_guard<std::mutex> l(mu_);
  step_ = step;
  lr_ = lr;
  rows_ = std::move(rows);
  std::fill(ready_.begin(), ready_.end(), nullptr);
  std::fill(released_.begin(), released_.end(), nullptr);
  std::fill(use_slot_.begin(), use_slot_.end(), -1);
  std::fill(expert_slot_last_.begin(), expert_slot_last_.end(), -1);
  next_expert_slot_ = 0;
  cv_.notify_all();
}

StreamingPipeline::StepRouting& StreamingPipeline::routing_of(long step) {
  auto [it, fresh] = routing_.try_emplace(step);
  if (fresh) {
    StepRouting& r = it->second;
    r.routed.assign(units_.size(), 1);
    r.layer_known.assign(units_.size(), 0);
    for (size_t u = 0; u < units_.size(); ++u)
      if (units_[u].kind == UnitKind::kExpert) r.routed[u] = 0;
      else ++r.landings;
    while (!routing_.empty() && routing_.begin()->first < step - 2) routing_.erase(routing_.begin());
  }
  return it->second;
}

bool StreamingPipeline::routed(long step, size_t u) { return routing_of(step).routed[u] != 0; }

void StreamingPipeline::set_routing(int layer, const std::vector<int>& routed_units) {
  std::lock_guard<std::mutex> l(mu_);
  StepRouting& r = routing_of(step_);
  for (int u : routed_units) r.routed[size_t(u)] = 1, ++r.landings;
  r.layer_known[size_t(layer)] = 1;
  cv_.notify_all();
}

void StreamingPipeline::uploader_loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    cv_.wait(l, [&] { return stop_ || step_ > uploaded_step_; });
    if (stop_) return;
    const long s = step_;
    const EmbeddingRows rows = rows_;
    for (size_t i = 0; i < uses_.size(); ++i) {
      const UnitUse& u = uses_[i];
      if (u.expert) {
        upload_expert(i, s, l);
        if (stop_) return;
        continue;
      }
      if (!u.fetch) {
        ready_[i] = ready_[size_t(u.prev_of_slot)];
        cv_.notify_all();
        continue;
      }
      if (leader_) {
        l.unlock();
        leader_->wait_updated(size_t(u.unit), s - 1, stopping_);
        l.lock();
      } else {
        // The embedding's rows: ready once the rows this step reads are (update_embedding).
        cv_.wait(l, [&] { return stop_ || updated_[size_t(u.unit)] >= s - 1 || (u.rows_only && rows_ready_ >= s - 1); });
      }
      opt_ready_time_[i] = now_seconds();
      cv_.wait(l, [&] { return stop_ || u.prev_of_slot < 0 || released_[size_t(u.prev_of_slot)]; });
      if (stop_) return;
      EventPtr free = u.prev_of_slot < 0 ? prev_step_done_ : released_[size_t(u.prev_of_slot)];
      l.unlock();
      EventPtr e = issue_upload(u.slot, size_t(u.unit), u.rows_only ? rows.get() : nullptr, free);
      l.lock();
      ready_[i] = e;
      cv_.notify_all();
    }
    uploaded_step_ = s;
  }
}

void StreamingPipeline::upload_expert(size_t i, long s, std::unique_lock<std::mutex>& l) {
  const size_t unit = size_t(uses_[i].unit);
  const int layer = units_[unit].layer;
  if (!uses_[i].backward)  // the backward's routing is the forward's
    cv_.wait(l, [&] { return stop_ || routing_of(s).layer_known[size_t(layer)]; });
  if (stop_ || !routed(s, unit)) return;
  cv_.wait(l, [&] { return stop_ || updated_[unit] >= s - 1; });
  opt_ready_time_[i] = now_seconds();
  const int k = next_expert_slot_++ % int(expert_slots_.size());
  const int prev = expert_slot_last_[size_t(k)];
  expert_slot_last_[size_t(k)] = int(i);
  use_slot_[i] = k;
  cv_.wait(l, [&] { return stop_ || prev < 0 || released_[size_t(prev)]; });
  if (stop_) return;
  const EventPtr free = prev < 0 ? prev_step_done_ : released_[size_t(prev)];
  l.unlock();
  if (free) backend_.stream_wait(StreamKind::kH2D, free);
  backend_.copy_h2d(expert_slots_[size_t(k)], weights_of(unit), units_[unit].numel * elem_bytes());
  EventPtr e = backend_.record(StreamKind::kH2D);
  l.lock();
  ready_[i] = e;
  cv_.notify_all();
}

EventPtr StreamingPipeline::issue_upload(int slot, size_t unit, const std::vector<int32_t>* rows, const EventPtr& after) {
  if (after) backend_.stream_wait(StreamKind::kH2D, after);
  if (rows) {
    upload_embedding_rows(slots_[size_t(slot)], *rows);
  } else {
    const void* src = staging_.upload_staging ? convert_for_upload(slot, unit) : weights_of(unit);
    backend_.copy_h2d(slots_[size_t(slot)], src, units_[unit].numel * elem_bytes());
  }
  EventPtr e = backend_.record(StreamKind::kH2D);
  if (staging_.upload_staging && !rows) staged_[size_t(slot)] = e;
  return e;
}

Status StreamingPipeline::check_idle() {
  std::lock_guard<std::mutex> l(mu_);
  const bool idle = uploaded_step_ == step_ && std::all_of(updated_.begin(), updated_.end(), [&](long s) { return s >= step_; });
  if (!idle && !leader_)
    return failed_precondition("an upload between steps while step " + std::to_string(step_) + " is in flight");
  return Status::Ok();
}

Result<EventPtr> StreamingPipeline::upload_between_steps(int slot, int unit, const std::vector<int32_t>* rows,
                                                         const EventPtr& after) {
  MT_RETURN_IF_ERROR(check_idle());
  return issue_upload(slot, size_t(unit), rows, after);
}

Result<EventPtr> StreamingPipeline::upload_expert_between_steps(int slot, int unit, const EventPtr& after) {
  MT_RETURN_IF_ERROR(check_idle());
  if (after) backend_.stream_wait(StreamKind::kH2D, after);
  backend_.copy_h2d(expert_slots_[size_t(slot)], weights_of(size_t(unit)), units_[size_t(unit)].numel * elem_bytes());
  return backend_.record(StreamKind::kH2D);
}

const void* StreamingPipeline::convert_for_upload(int slot, size_t unit) {
  if (staged_[size_t(slot)]) backend_.host_wait(staged_[size_t(slot)]);
  bf16* dst = staging_.upload_staging + size_t(slot) * staging_.slot_numel;
  const HostUnit& hu = store_.unit(unit);
  round_to_bf16(dst, hu.master, hu.numel);
  return dst;
}

size_t StreamingPipeline::elem_bytes() const { return compute_elem_bytes(cfg_.precision); }

const void* StreamingPipeline::weights_of(size_t unit) const {
  const HostUnit& hu = store_.unit(unit);
  return cfg_.precision == Precision::kBf16 ? static_cast<const void*>(hu.shadow) : static_cast<const void*>(hu.master);
}

void StreamingPipeline::wait_ready(int use, ComputeTimeline& timeline) {
  const EventPtr from = timeline.mark();  // if the host waits below, the device idles from here
  const double t0 = now_seconds();
  EventPtr e;
  double opt_t;
  {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return ready_[size_t(use)] != nullptr; });
    e = ready_[size_t(use)];
    opt_t = uses_[size_t(use)].fetch ? opt_ready_time_[size_t(use)] : 0;
  }
  const double t1 = now_seconds();
  timeline.stall_until(from, e, std::max(0.0, std::min(opt_t, t1) - t0));
}

void StreamingPipeline::release(int use) {
  EventPtr e = backend_.record(StreamKind::kCompute);
  std::lock_guard<std::mutex> l(mu_);
  released_[size_t(use)] = e;
  cv_.notify_all();
}

void StreamingPipeline::end_step(EventPtr done) {
  std::lock_guard<std::mutex> l(mu_);
  prev_step_done_ = std::move(done);
}

void StreamingPipeline::grads_sent(int unit, EventPtr landed, bool tied_part) {
  std::lock_guard<std::mutex> l(mu_);
  landings_.push_back({unit, std::move(landed), tied_part, step_, lr_, rows_});
  cv_.notify_all();
}

void StreamingPipeline::optimizer_loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    cv_.wait(l, [&] { return stop_ || !landings_.empty(); });
    if (landings_.empty()) return;
    Landing g = landings_.front();
    landings_.pop_front();
    l.unlock();
    backend_.host_wait(g.event);
    const double t0 = now_seconds();  // optimizer work only, not the wait for the copy
    land(g);
    l.lock();
    optimizer_seconds_ += now_seconds() - t0;
  }
}

void StreamingPipeline::land(const Landing& g) {
  if (g.tied_part) return;  // read with the embedding's own share
  // An event of a failed device completes, but the copy behind it may never have run: once the
  // device has failed, no gradient is read and no update applied (refusal is sticky).
  const bool failed = refuse_if(backend_.error());
  const size_t u = size_t(g.unit);
  int expected;  // the step's landings: every unit but the experts it routed no token to
  {
    std::lock_guard<std::mutex> l(mu_);
    expected = routing_of(g.step).landings;
  }
  if (!failed) {
    if (u == 0) scatter_embedding_grad(g.rows);
    const void* grad = store_.grad(u);
    if (cfg_.nodes) (void)refuse_if(sum_over_nodes(u));
    // Sharded, only the owner holds the sum; the others count 0, and the norm sums over nodes.
    sumsq_[u] = !owns(u)                                  ? 0.0
                : store_.layout() == MemoryLayout::kExact ? unit_grad_sumsq(pool_, units_[u], static_cast<const float*>(grad))
                                                          : unit_grad_sumsq(pool_, units_[u], static_cast<const bf16*>(grad));
  }
  if (cfg_.update_during_backward) {
    if (!refuse_if(check_grad_norm(g.step, std::sqrt(sumsq_[u]), sumsq_, units_))) update_unit(u, g.step, g.lr, 1.0f);
    else skip_updates(g.step);
    store_.give_back_grad(u);  // used: a grad window's buffer goes to the next gradient
  } else if (!failed && restore_[u] && landed_ + 1 < expected && std::isfinite(sumsq_[u]) &&
             (cfg_.speculate_after_clip || !last_step_clipped_)) {
    speculate_unit(u, g.step, g.lr);
  }
  if (++landed_ == expected) {
    landed_ = 0;
    clear_unrouted(g.step);
    if (!cfg_.update_during_backward) return update_phase(g.step, g.lr);
    double total = 0;  // nothing to scale (no clipping), but the step's norm is still reported
    for (double s : sumsq_) total += s;
    publish_norm(g.step, std::sqrt(total));
    for (size_t e = 0; e < units_.size(); ++e)  // the experts without tokens: done, untouched
      if (sumsq_[e] == 0 && units_[e].kind == UnitKind::kExpert && !is_routed(g.step, e)) mark_updated(e, g.step);
  }
}

bool StreamingPipeline::is_routed(long step, size_t u) {
  std::lock_guard<std::mutex> l(mu_);
  return routed(step, u);
}

// An expert the step routed no token to has no gradient this step: its sum of squares is 0
// (its host gradient buffer holds an older step's, never read).
void StreamingPipeline::clear_unrouted(long step) {
  for (size_t u = 0; u < units_.size(); ++u)
    if (units_[u].kind == UnitKind::kExpert && !is_routed(step, u)) sumsq_[u] = 0;
}

Status StreamingPipeline::sum_over_nodes(size_t u) {
  const HostUnit& hu = store_.unit(u);
  const bool exact = store_.layout() == MemoryLayout::kExact;
  float* grad = exact ? static_cast<float*>(hu.grad) : node_grad_.data();
  if (!exact) widen_bf16(grad, static_cast<const bf16*>(hu.grad), hu.numel);
  MT_RETURN_IF_ERROR(cfg_.owners.empty() ? cfg_.nodes->all_reduce(grad, hu.numel)
                                         : cfg_.nodes->reduce(grad, hu.numel, cfg_.owners[u]));
  if (!exact && owns(u)) round_to_bf16(static_cast<bf16*>(hu.grad), grad, hu.numel);
  return Status::Ok();
}

// Gathers the rows into staging and copies them, packed, to the slot. The previous copy out of
// staging finished long ago (its step's forward waited for it); waiting keeps that explicit.
void StreamingPipeline::upload_embedding_rows(void* slot, const std::vector<int32_t>& rows) {
  if (rows_uploaded_) backend_.host_wait(rows_uploaded_);
  const size_t C = cfg_.embedding_width, row_bytes = C * elem_bytes();
  char* staging = static_cast<char*>(staging_.embedding_rows);
  if (staging_.upload_staging) {  // convert uploads: no shadow; round the rows' masters
    const float* master = store_.unit(0).master;
    bf16* out = reinterpret_cast<bf16*>(staging);
    for (size_t r = 0; r < rows.size(); ++r) round_to_bf16(out + r * C, master + size_t(rows[r]) * C, C);
  } else {
    const char* table = static_cast<const char*>(weights_of(0));
    for (size_t r = 0; r < rows.size(); ++r) std::memcpy(staging + r * row_bytes, table + size_t(rows[r]) * row_bytes, row_bytes);
  }
  backend_.copy_h2d(slot, staging_.embedding_rows, rows.size() * row_bytes);
  rows_uploaded_ = backend_.record(StreamKind::kH2D);
}

namespace {
// Untied: grad[rows[r]] = packed[r], every other row zero. Only the rows a previous scatter
// wrote need clearing first (every row when that is not known).
template <typename G>
void scatter_rows(G* grad, size_t numel, const G* packed, const std::vector<int32_t>& rows, size_t C,
                  const std::vector<int32_t>* written) {
  if (!written) std::memset(static_cast<void*>(grad), 0, numel * sizeof(G));
  else
    for (int32_t row : *written) std::memset(static_cast<void*>(grad + size_t(row) * C), 0, C * sizeof(G));
  for (size_t r = 0; r < rows.size(); ++r) std::memcpy(grad + size_t(rows[r]) * C, packed + r * C, C * sizeof(G));
}

// Tied: grad = the LM head's share + the lookup's share, which is non-zero only on the step's
// (ascending) rows. One pass writes every element, with the same sums as adding a dense lookup
// share (head + 0 off the rows), so it matches the resident executor bit for bit.
template <typename G>
void merge_rows(G* grad, size_t numel, const G* head_share, const G* packed, const std::vector<int32_t>& rows,
                size_t C) {
  size_t r = 0;
  for (size_t v = 0; v < numel / C; ++v) {
    const G* lookup = r < rows.size() && size_t(rows[r]) == v ? packed + C * r++ : nullptr;
    for (size_t c = v * C; c < (v + 1) * C; ++c)
      grad[c] = from_float<G>(to_float(head_share[c]) + (lookup ? to_float(lookup[c - v * C]) : 0.0f));
  }
}

template <typename G>
void embedding_grad(G* grad, size_t numel, const void* head_share, const void* packed, const std::vector<int32_t>& rows,
                    size_t C, const std::vector<int32_t>* written) {
  if (head_share)
    merge_rows(grad, numel, static_cast<const G*>(head_share), static_cast<const G*>(packed), rows, C);
  else scatter_rows(grad, numel, static_cast<const G*>(packed), rows, C, written);
}
}  // namespace

// The embedding's gradient in the host store, from the rows copied into staging (and, when
// tied, the LM head's share).
void StreamingPipeline::scatter_embedding_grad(const EmbeddingRows& rows) {
  const HostUnit& hu = store_.unit(0);
  const std::vector<int32_t>* written = scattered_.get();
  if (store_.layout() == MemoryLayout::kExact)
    embedding_grad(static_cast<float*>(hu.grad), hu.numel, staging_.tied_grad, staging_.embedding_rows, *rows,
                   cfg_.embedding_width, written);
  else
    embedding_grad(static_cast<bf16*>(hu.grad), hu.numel, staging_.tied_grad, staging_.embedding_rows, *rows,
                   cfg_.embedding_width, written);
  // Summed over nodes, the gradient has the other nodes' rows too: clear it all next time.
  scattered_ = cfg_.nodes ? nullptr : rows;
}

bool StreamingPipeline::refuse_if(const Status& why) {
  std::lock_guard<std::mutex> l(mu_);
  if (error_.ok() && !why.ok()) error_ = why;
  return !error_.ok();
}

void StreamingPipeline::refuse_update(Status why) { (void)refuse_if(why); }

void StreamingPipeline::skip_updates(long step) {
  std::lock_guard<std::mutex> l(mu_);
  for (long& s : updated_) s = std::max(s, step);  // nothing applied, but nothing waits forever
  cv_.notify_all();
}

void StreamingPipeline::publish_norm(long step, double norm) {
  std::lock_guard<std::mutex> l(mu_);
  norm_step_ = std::max(norm_step_, step);
  norm_ = norm;
  cv_.notify_all();
}

Status StreamingPipeline::error() {
  std::lock_guard<std::mutex> l(mu_);
  return error_;
}

void StreamingPipeline::mark_updated(size_t u, long step) {
  std::lock_guard<std::mutex> l(mu_);
  updated_[u] = step;
  cv_.notify_all();
}

void StreamingPipeline::wait_updated(size_t unit, long step, const std::atomic<bool>& stop) {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop && !stop_ && updated_[unit] < step) cv_.wait_for(l, std::chrono::milliseconds(20));
}

Status StreamingPipeline::sync() {
  std::unique_lock<std::mutex> l(mu_);
  if (leader_) return error_;  // a follower applies no updates
  cv_.wait(l, [&] {
    for (long s : updated_)
      if (s < step_) return false;
    return true;
  });
  return error_;
}

void StreamingPipeline::mark_all_updated(long step) {
  std::lock_guard<std::mutex> l(mu_);
  std::fill(updated_.begin(), updated_.end(), step);
  step_ = uploaded_step_ = step;  // no upload pass for a step that was loaded, not run
  cv_.notify_all();
}

double StreamingPipeline::take_optimizer_seconds() {
  std::lock_guard<std::mutex> l(mu_);
  double s = optimizer_seconds_;
  optimizer_seconds_ = 0;
  return s;
}

double StreamingPipeline::grad_norm_of(long step) {
  if (leader_) return leader_->grad_norm_of(step);
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return stop_ || norm_step_ >= step || !error_.ok(); });
  return norm_step_ == step ? norm_ : std::nan("");
}

}  // namespace mt

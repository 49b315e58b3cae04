// The StreamingPipeline's optimizer side once a step's gradients have landed (or, speculating,
// as each lands): the update phase after the norm, the speculative updates with their restore
// copies, the embedding's update with the next step's rows first, and the sharded optimizer's
// updates and broadcasts. streaming_pipeline.cc holds the threads, the uploads and the landings.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <thread>

#include "engine/exec/executor.h"
#include "engine/exec/streaming_pipeline.h"

namespace mt {

namespace {
// memcpy on the pool's threads, in 4 MiB pieces, a contiguous block a worker: a restore copy
// moves gigabytes, and worker b's block of a region is about the part it updates, which a NUMA
// placement keeps on its node (the restore buffer's pages then land there on the first save).
void parallel_copy(ThreadPool& pool, void* dst, const void* src, size_t bytes) {
  pool.parallel_ranges(bytes, size_t(4) << 20, [&](size_t o, size_t k) {
    std::memcpy(static_cast<char*>(dst) + o, static_cast<const char*>(src) + o, k);
  });
}
}  // namespace

void StreamingPipeline::update_phase(long step, float lr) {
  // Sharded: each unit's sum of squares is on its owner alone (0 elsewhere), so the sum over
  // nodes is the exact value, and every node then finds the same norm.
  if (!cfg_.owners.empty() && refuse_if(cfg_.nodes->all_reduce(sumsq_.data(), sumsq_.size()))) return skip_updates(step);
  double total = 0;
  for (double s : sumsq_) total += s;  // unit order, as the resident executor sums
  const double norm = std::sqrt(total);
  if (refuse_if(check_grad_norm(step, norm, sumsq_, units_))) {
    settle_speculation(step, lr, -1);  // the in-memory state as it was before the step
    return skip_updates(step);
  }
  publish_norm(step, norm);
  const float clip = clip_factor(norm, cfg_.optimizer.grad_clip);
  last_step_clipped_ = clip != 1.0f;
  if (!cfg_.owners.empty()) return update_shards(step, lr, clip);
  settle_speculation(step, lr, clip);
  for (size_t u : update_order_)
    if (speculating(u, step)) speculated_at_[u] = 0;
    else if (!is_routed(step, u)) mark_updated(u, step);  // an expert without tokens: untouched
    else if (u == 0) update_embedding(step, lr, clip);
    else update_unit(u, step, lr, clip);
}

// The embedding, the next step's rows first: the next forward's first upload is those rows, so
// it waits for their update only while the rest of the table (most of it) overlaps that
// forward. The next step's rows are known once it has begun; the table goes in chunks of rows
// and the rows are taken ahead as soon as they are known. AdamW is elementwise, so each
// element's update is the same whatever the order (rows are whole multiples of 16 elements,
// so no SIMD remainder differs either).
void StreamingPipeline::update_embedding(long step, float lr, float clip) {
  store_.before_update(0);
  const ParamSchema& e = units_[0];
  const size_t C = cfg_.embedding_width;
  if (e.tensors.size() != 1 || C == 0 || C % 16 != 0) return update_unit(0, step, lr, clip);
  const size_t V = e.numel / C;
  constexpr size_t kChunk = 4096;  // rows between looks for the next step's rows
  std::vector<char> done(V, 0);
  bool rows_first = false;
  for (size_t first = 0; first < V; first += kChunk) {
    if (!rows_first) {
      EmbeddingRows next;
      {
        std::lock_guard<std::mutex> l(mu_);
        if (step_ > step) next = rows_;  // the next step has begun: the rows it reads
      }
      if (next) {
        update_rows(*next, done, step, lr, clip);
        std::lock_guard<std::mutex> l(mu_);
        rows_ready_ = step;
        rows_first = true;
        cv_.notify_all();
      }
    }
    std::vector<int32_t> chunk(std::min(kChunk, V - first));
    std::iota(chunk.begin(), chunk.end(), int32_t(first));
    update_rows(chunk, done, step, lr, clip);  // less the next step's rows, done first
  }
  store_.count_update(0);
  mark_updated(0, step);
}

void StreamingPipeline::update_rows(const std::vector<int32_t>& rows, std::vector<char>& done, long step, float lr,
                                    float clip) {
  const cpu::AdamWParams p = adamw_params(step, lr, clip);
  const size_t C = cfg_.embedding_width;
  const bool exact = store_.layout() == MemoryLayout::kExact;
  constexpr size_t kRows = 64;  // per parallel work item
  pool_.parallel_for(int((rows.size() + kRows - 1) / kRows), [&](int i) {
    for (size_t k = size_t(i) * kRows; k < std::min(rows.size(), size_t(i + 1) * kRows); ++k) {
      const size_t r = size_t(rows[k]);
      if (done[r]) continue;
      if (exact) adamw_range(units_[0], store_.state<float>(0), p, r * C, C);
      else adamw_range(units_[0], store_.state<bf16>(0), p, r * C, C);
      done[r] = 1;
    }
  });
}

void StreamingPipeline::speculate_unit(size_t u, long step, float lr) {
  copy_restore(u, true);
  adamw(u, step, lr, 1.0f);
  speculated_at_[u] = step;
  ++speculated_total_;
}

// Masters, then m and v in the store's layout, into the unit's restore buffer (save) or back.
void StreamingPipeline::copy_restore(size_t u, bool save) {
  const HostUnit& hu = store_.unit(u);
  const size_t n = hu.numel, se = state_elem_bytes(store_.layout());
  char* copy = restore_[u].get();
  const std::pair<void*, size_t> parts[] = {{hu.master, n * sizeof(float)}, {hu.m, n * se}, {hu.v, n * se}};
  for (const auto& [state, bytes] : parts) {
    if (save) parallel_copy(pool_, copy, state, bytes);
    else parallel_copy(pool_, state, copy, bytes);
    copy += bytes;
  }
  if (!save && hu.shadow) round_to_bf16(hu.shadow, hu.master, n);  // what the shadow held before the update
}

// The speculated units of `step` once its norm is known: kept and marked (clip factor 1), or
// restored and updated again with the step's factor (clip < 0: refused, restored only). Unit
// order, so the next forward's first units are ready first.
void StreamingPipeline::settle_speculation(long step, float lr, float clip) {
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!speculating(u, step)) continue;
    if (clip == 1.0f) {
      store_.count_update(u);
      mark_updated(u, step);
      continue;
    }
    copy_restore(u, false);
    ++rolled_back_total_;
    if (clip > 0) update_unit(u, step, lr, clip);
    else speculated_at_[u] = 0;
  }
}

// Every node updates its own units (1/R of the optimizer's work, in parallel with the others)
// while its broadcaster moves every unit's masters in unit order — the order the next step
// uploads them — each as soon as its owner has updated it.
void StreamingPipeline::update_shards(long step, float lr, float clip) {
  {
    std::lock_guard<std::mutex> l(mu_);
    broadcast_step_ = step;
    cv_.notify_all();
  }
  for (size_t u = 0; u < units_.size(); ++u)
    if (owns(u)) update_unit(u, step, lr, clip);
}

void StreamingPipeline::broadcaster_loop() {
  std::unique_lock<std::mutex> l(mu_);
  for (long done = 0;;) {
    cv_.wait(l, [&] { return stop_ || broadcast_step_ > done; });
    if (stop_) return;
    done = broadcast_step_;
    l.unlock();
    broadcast_updates(done);
    l.lock();
  }
}

// The owner of a unit goes on with its next step once it has updated the unit, so these
// broadcasts may still be going out while the optimizer thread reduces the next step's first
// gradients: hence their own communicator (cfg_.weights), with its own order of collectives.
void StreamingPipeline::broadcast_updates(long step) {
  for (size_t u = 0; u < units_.size(); ++u) {
    if (owns(u)) {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || updated_[u] >= step; });
      if (stop_) return;
    }
    const HostUnit& hu = store_.unit(u);
    if (!owns(u)) store_.before_update(u);  // the owner's update arrives into it
    if (refuse_if(cfg_.weights->broadcast(hu.master, hu.numel, cfg_.owners[u]))) return skip_updates(step);
    if (owns(u)) continue;
    if (hu.shadow) round_to_bf16(hu.shadow, hu.master, hu.numel);  // as the owner's optimizer wrote its own
    mark_updated(u, step);
  }
}

void StreamingPipeline::update_unit(size_t u, long step, float lr, float clip) {
  adamw(u, step, lr, clip);
  store_.count_update(u);
  mark_updated(u, step);
}

cpu::AdamWParams StreamingPipeline::adamw_params(long step, float lr, float clip) const {
  const OptimizerConfig& o = cfg_.optimizer;
  return {lr, o.beta1, o.beta2, o.eps, o.weight_decay, clip, step};
}

void StreamingPipeline::adamw(size_t u, long step, float lr, float clip) {
  store_.before_update(u);  // a checkpoint in flight has written it
  const auto t0 = std::chrono::steady_clock::now();
  const cpu::AdamWParams p = adamw_params(store_.adam_step(u, step), lr, clip);
  // In memory, or (the NVMe tier) read into its window ahead of this order and written back
  // behind it; a drive's error refuses the step's remaining updates and fails the job.
  auto update = [&](auto st) {
    adamw_unit(pool_, units_[u], st, p);
    return Status::Ok();
  };
  const Status s = store_.layout() == MemoryLayout::kExact ? store_.with_state<float>(u, true, update)
                                                           : store_.with_state<bf16>(u, true, update);
  (void)refuse_if(s);
  if (cfg_.optimizer_slowdown > 1)  // a slower host, for benchmarks: the same work, stretched
    std::this_thread::sleep_for((std::chrono::steady_clock::now() - t0) * (cfg_.optimizer_slowdown - 1));
}

}  // namespace mt

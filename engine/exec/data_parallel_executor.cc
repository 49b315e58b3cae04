#include "engine/exec/data_parallel_executor.h"

#include <algorithm>
#include <thread>

#include "engine/dist/in_process_comm.h"

namespace mt {

Status check_devices(int devices, const TrainOptions& opt) {
  if (devices < 1 || devices > 64) return invalid_argument("devices = " + std::to_string(devices) + ": must be in [1, 64]");
  if (opt.micro_batch <= 0 || opt.global_batch % (devices * opt.micro_batch) != 0)
    return invalid_argument("global_batch = " + std::to_string(opt.global_batch) + " does not split into devices = " +
                            std::to_string(devices) + " shards of whole micro-batches (micro_batch = " +
                            std::to_string(opt.micro_batch) + "): make it a multiple of " +
                            std::to_string(devices * std::max(opt.micro_batch, 1)));
  return Status::Ok();
}

Result<std::unique_ptr<DataParallelExecutor>> DataParallelExecutor::create(const ModelConfig& cfg, const TrainOptions& opt,
                                                                           const StreamingOptions& so,
                                                                           std::vector<std::unique_ptr<Backend>> backends,
                                                                           const CommOptions& copt) {
  const int n = int(backends.size());
  MT_RETURN_IF_ERROR(validate(opt, cfg));
  MT_RETURN_IF_ERROR(check_devices(n, opt));
  std::unique_ptr<DataParallelExecutor> e(new DataParallelExecutor(cfg, opt));
  e->comms_ = make_in_process_comms(n, copt);
  TrainOptions shard = opt;
  shard.global_batch = opt.global_batch / n;
  for (int d = 0; d < n; ++d) {
    ReplicaOptions ro;
    ro.comm = e->comms_[size_t(d)].get();
    ro.leader = d > 0 ? e->replicas_[0].get() : nullptr;
    ro.rows_tokens = long(opt.global_batch) * opt.seq_len;
    auto r = StreamingExecutor::create(cfg, shard, so, std::move(backends[size_t(d)]), ro);
    if (!r.ok()) return r.status().with_context("device " + std::to_string(d));
    e->replicas_.push_back(std::move(r).value());
  }
  return e;
}

DataParallelExecutor::~DataParallelExecutor() {
  // Followers first: their uploaders may be waiting on the leader's updates.
  while (replicas_.size() > 1) replicas_.pop_back();
}

void DataParallelExecutor::set_steps_done(long steps) {
  for (auto& r : replicas_) r->set_steps_done(steps);
}

uint64_t DataParallelExecutor::host_bytes() const {
  uint64_t b = 0;
  for (const auto& r : replicas_) b += r->host_bytes();
  return b;
}

Batch DataParallelExecutor::shard(const Batch& batch, int d) const {
  const int per = batch.num_seqs / devices();
  const size_t from = size_t(d) * size_t(per) * size_t(batch.seq_len), len = size_t(per) * size_t(batch.seq_len);
  Batch s;
  s.num_seqs = per;
  s.seq_len = batch.seq_len;
  s.inputs.assign(batch.inputs.begin() + long(from), batch.inputs.begin() + long(from + len));
  s.targets.assign(batch.targets.begin() + long(from), batch.targets.begin() + long(from + len));
  if (!batch.positions.empty())
    s.positions.assign(batch.positions.begin() + long(from), batch.positions.begin() + long(from + len));
  return s;
}

Result<StepStats> DataParallelExecutor::step(const Batch& batch) {
  MT_RETURN_IF_ERROR(check_step_batch(batch, opt_, cfg_.vocab_size));
  const EmbeddingRows rows = replicas_[0]->embedding_rows(batch.inputs);
  const long counted = batch.counted_targets();
  const int n = devices();
  std::vector<Result<StepStats>> got(size_t(n), Result<StepStats>(internal_error("not run")));
  std::vector<std::thread> threads;
  for (int d = 0; d < n; ++d)
    threads.emplace_back([&, d] { got[size_t(d)] = replicas_[size_t(d)]->step_shard(shard(batch, d), rows, counted); });
  for (auto& t : threads) t.join();
  for (int d = 0; d < n; ++d)  // the first failure; the device that failed first names itself in it
    if (!got[size_t(d)].ok()) return got[size_t(d)].status().with_context("device " + std::to_string(d));
  // The loss: micro-batch sums in global order, as one device sums them.
  double loss_sum = 0;
  for (int d = 0; d < n; ++d)
    for (double s : replicas_[size_t(d)]->micro_batch_loss_sums()) loss_sum += s;
  StepStats st = got[0].value();
  st.loss = counted > 0 ? loss_sum / double(counted) : 0.0;
  MT_RETURN_IF_ERROR(check_step_loss(st.step, st.loss));
  for (int d = 1; d < n; ++d) {  // the step ends with its slowest device; traffic adds up
    const StepStats& o = got[size_t(d)].value();
    st.tokens += o.tokens;
    st.step_seconds = std::max(st.step_seconds, o.step_seconds);
    st.compute_seconds = std::max(st.compute_seconds, o.compute_seconds);
    st.h2d_bytes += o.h2d_bytes;
    st.d2h_bytes += o.d2h_bytes;
    st.h2d_seconds = std::max(st.h2d_seconds, o.h2d_seconds);
    st.d2h_seconds = std::max(st.d2h_seconds, o.d2h_seconds);
    st.copy_wait_seconds = std::max(st.copy_wait_seconds, o.copy_wait_seconds);
    st.optimizer_wait_seconds = std::max(st.optimizer_wait_seconds, o.optimizer_wait_seconds);
    st.device_peak_bytes = std::max(st.device_peak_bytes, o.device_peak_bytes);
  }
  return st;
}

}  // namespace mt

#include "engine/exec/data_parallel_executor.h"

#include <algorithm>
#include <thread>

#include "engine/dist/in_process_comm.h"

namespace mt {

Result<std::unique_ptr<DataParallelExecutor>> DataParallelExecutor::create(const ModelConfig& cfg, const TrainOptions& opt,
                                                                           const StreamingOptions& so,
                                                                           std::vector<std::unique_ptr<Backend>> backends,
                                                                           const CommOptions& copt, NodeComms nodes,
                                                                           std::vector<std::unique_ptr<Communicator>> comms) {
  const int n = int(backends.size());
  MT_RETURN_IF_ERROR(validate(opt, cfg));
  MT_RETURN_IF_ERROR(check_devices(n, opt, nodes.size()));
  bool group_ok = comms.empty() || comms.size() == size_t(n);
  for (size_t d = 0; group_ok && d < comms.size(); ++d) group_ok = comms[d]->size() == n && comms[d]->rank() == int(d);
  if (!group_ok)
    return invalid_argument("the devices' communicators must be ranks 0.." + std::to_string(n - 1) + " of one group of " +
                            std::to_string(n) + ", in order");
  std::unique_ptr<DataParallelExecutor> e(new DataParallelExecutor(cfg, opt));
  e->nodes_ = nodes;
  // One device (a process of several under mpirun): no in-process group, whose reduce would make
  // the host thread wait for the compute stream at every unit for nothing.
  e->comms_ = std::move(comms);
  if (n > 1 && e->comms_.empty()) e->comms_ = make_in_process_comms(n, copt);
  TrainOptions shard = opt;
  shard.global_batch = opt.global_batch / (n * nodes.size());
  for (int d = 0; d < n; ++d) {
    ReplicaOptions ro;
    ro.comm = e->comms_.empty() ? nullptr : e->comms_[size_t(d)].get();
    ro.leader = d > 0 ? e->replicas_[0].get() : nullptr;
    ro.rows_tokens = long(opt.global_batch / nodes.size()) * opt.seq_len;
    ro.nodes = d == 0 ? nodes.grads : nullptr;
    ro.weights = d == 0 && nodes.grads ? nodes.weights : nullptr;
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

Batch DataParallelExecutor::shard(const Batch& batch, int part, int parts) const {
  const int per = batch.num_seqs / parts;
  const size_t from = size_t(part) * size_t(per) * size_t(batch.seq_len), len = size_t(per) * size_t(batch.seq_len);
  Batch s;
  s.num_seqs = per;
  s.seq_len = batch.seq_len;
  s.inputs.assign(batch.inputs.begin() + long(from), batch.inputs.begin() + long(from + len));
  s.targets.assign(batch.targets.begin() + long(from), batch.targets.begin() + long(from + len));
  if (!batch.positions.empty())
    s.positions.assign(batch.positions.begin() + long(from), batch.positions.begin() + long(from + len));
  return s;
}

Result<double> DataParallelExecutor::loss_sum() {
  std::vector<double> mine;
  for (auto& r : replicas_)
    for (double s : r->micro_batch_loss_sums()) mine.push_back(s);
  std::vector<double> all = mine;
  if (nodes_.size() > 1) {
    all.resize(mine.size() * size_t(nodes_.size()));
    MT_RETURN_IF_ERROR(nodes_.losses->all_gather(mine.data(), all.data(), mine.size()));
  }
  double sum = 0;
  for (double s : all) sum += s;
  return sum;
}

Result<StepStats> DataParallelExecutor::step(const Batch& batch) {
  MT_RETURN_IF_ERROR(check_step_batch(batch, opt_, cfg_.vocab_size));
  const long counted = batch.counted_targets();  // every node reads the whole global batch
  const int n = devices(), R = nodes_.size();
  const Batch node = R > 1 ? shard(batch, nodes_.rank(), R) : Batch{};
  const Batch& mine = R > 1 ? node : batch;
  const EmbeddingRows rows = replicas_[0]->embedding_rows(mine.inputs);
  std::vector<Result<StepStats>> got(size_t(n), Result<StepStats>(internal_error("not run")));
  std::vector<std::thread> threads;
  for (int d = 0; d < n; ++d)
    threads.emplace_back([&, d] { got[size_t(d)] = replicas_[size_t(d)]->step_shard(shard(mine, d, n), rows, counted); });
  for (auto& t : threads) t.join();
  for (int d = 0; d < n; ++d)  // the first failure; the device that failed first names itself in it
    if (!got[size_t(d)].ok()) return got[size_t(d)].status().with_context("device " + std::to_string(d));
  // The loss: micro-batch sums in global order, as one device sums them.
  MT_ASSIGN_OR_RETURN(const double sum, loss_sum());
  StepStats st = got[0].value();
  st.loss = counted > 0 ? sum / double(counted) : 0.0;
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
  st.tokens *= R;  // the global batch's
  return st;
}

}  // namespace mt

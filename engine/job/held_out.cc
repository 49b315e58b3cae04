#include "engine/job/held_out.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "engine/job/job.h"

namespace mt {

namespace {

long rows_wanted(const JobSpec& spec) {
  return std::max<long>(1, long(spec.eval.max_tokens / spec.train.seq_len));
}

// `b` completed to `padded` rows that count nothing (one document each when it has documents).
void pad_rows(Batch& b, int padded) {
  const size_t T = size_t(b.seq_len), n = size_t(b.num_seqs);
  b.num_seqs = padded;
  b.inputs.resize(size_t(padded) * T, 0);
  b.targets.resize(size_t(padded) * T, -1);
  if (!b.positions.empty())
    for (size_t r = n; r < size_t(padded); ++r)
      for (size_t t = 0; t < T; ++t) b.positions.push_back(int32_t(t));
}

}  // namespace

uint64_t HeldOutSet::host_bytes(const JobSpec& spec) {
  if (!spec.eval.enabled || spec.train.seq_len < 1 || spec.train.micro_batch < 1) return 0;
  const uint64_t mb = uint64_t(spec.train.micro_batch);
  const uint64_t rows = (uint64_t(rows_wanted(spec)) + mb - 1) / mb * mb;
  return rows * uint64_t(spec.train.seq_len) * 3 * sizeof(int32_t);
}

Result<HeldOutSet> HeldOutSet::open(const JobSpec& spec, int vocab, int batch_rows) {
  DataSpec d = spec.eval.data;
  if (d.source == "jsonl" || d.source == "shards") d.epochs = 1;  // one pass; its end is OUT_OF_RANGE
  auto src = make_data_source(d, vocab);
  if (!src.ok()) return src.status().with_context("eval.data");
  DataSource& s = **src;
  const int T = spec.train.seq_len, mb = spec.train.micro_batch;
  long rows = rows_wanted(spec);
  if (const uint64_t n = s.num_sequences(T); n > 0) rows = long(std::min<uint64_t>(uint64_t(rows), n));
  if (rows < 1)
    return invalid_argument("eval.data (" + s.describe() + ") holds no row of seq_len " + std::to_string(T) + " tokens");
  HeldOutSet set;
  set.rows_ = rows;
  // Read batch by batch (the rows in order, as one read of them all would give them): the set is
  // held once, never beside a copy of itself (HeldOutSet::host_bytes is what the planner counts).
  const int per = std::max(mb, batch_rows / mb * mb);
  for (long first = 0; first < rows; first += per) {
    const int n = int(std::min<long>(per, rows - first));
    Batch b;
    Status got = s.next_batch(n, T, b);
    if (!got.ok()) return got.with_context("reading eval.data (" + s.describe() + ")");
    set.counted_ += b.counted_targets();
    pad_rows(b, (n + mb - 1) / mb * mb);
    set.batches_.push_back(std::move(b));
  }
  if (set.counted_ == 0)
    return invalid_argument("eval.data (" + s.describe() + "): its first " + std::to_string(rows) +
                            " rows have no target that counts (every one masked)");
  set.describe_ = std::to_string(rows) + " rows of " + std::to_string(T) + " (" + std::to_string(set.counted_) +
                  " counted targets) from " + s.describe();
  return set;
}

std::string eval_line(const EvalReport& r) {
  char buf[224];
  if (r.best)
    std::snprintf(buf, sizeof buf, "eval step %ld loss %.6f (best) over %ld targets in %.3f s", r.step, r.loss, r.counted,
                  r.seconds);
  else
    std::snprintf(buf, sizeof buf, "eval step %ld loss %.6f (best %.6f at step %ld) over %ld targets in %.3f s", r.step,
                  r.loss, r.best_loss, r.best_step, r.counted, r.seconds);
  return buf;
}

Result<EvalStats> HeldOutSet::evaluate(Executor& ex, const std::atomic<bool>* stop) const {
  EvalStats total;
  for (const Batch& b : batches_) {
    if (stop && stop->load()) return Status(StatusCode::kCancelled, "the evaluation was cancelled");
    MT_ASSIGN_OR_RETURN(EvalStats e, ex.evaluate(b));
    total.add(e);
  }
  return total;
}

}  // namespace mt

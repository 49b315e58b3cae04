// A job's held-out set (spec.eval) and its evaluation. The set is read and tokenized once, when
// the job starts: the first eval.max_tokens token slots (whole rows of seq_len) of one pass over
// eval.data in that source's own fixed order (a jsonl or shards set: its epoch-0 shuffle by
// eval.data.seed, packed or padded as training packs). It is kept as batches of at most
// Executor::eval_batch_rows() rows, the last one completed to whole micro-batches with rows that
// count nothing, so every evaluation of the same weights gives the same bits, on resume too.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/exec/executor.h"
#include "engine/job/job_spec.h"

namespace mt {

// One evaluation of a job, as its hooks, log and curves report it.
struct EvalReport {
  long step = 0;         // the optimizer steps the weights had taken
  double loss = 0;       // mean loss per counted target over the set
  long counted = 0;      // the set's counted targets
  double seconds = 0;    // the pass's own time (streaming: on the device's clock)
  bool best = false;     // the lowest held-out loss of the run so far (ties: the earlier step)
  long best_step = 0;    // the lowest so far (this one's when best)
  double best_loss = 0;
};
// The line the job log and the CLI show for it: "eval step 40 loss 2.345678 (best) ...".
std::string eval_line(const EvalReport& r);

class HeldOutSet {
 public:
  // spec.eval.enabled; `batch_rows` the executor's eval_batch_rows().
  static Result<HeldOutSet> open(const JobSpec& spec, int vocab, int batch_rows);
  // The host bytes the set takes for `spec` at most (what the planner counts): inputs, targets
  // and positions of max_tokens slots, rounded up to whole micro-batches.
  static uint64_t host_bytes(const JobSpec& spec);

  // The current weights over the whole set: summed over its batches in order.
  // CANCELLED, between two batches, once `stop` is set (a cancel or a signal during an
  // evaluation over many rows ends it within a batch).
  Result<EvalStats> evaluate(Executor& ex, const std::atomic<bool>* stop = nullptr) const;
  long rows() const { return rows_; }
  long counted() const { return counted_; }
  const std::string& describe() const { return describe_; }

 private:
  std::vector<Batch> batches_;
  long rows_ = 0, counted_ = 0;
  std::string describe_;
};

}  // namespace mt

#include "engine/exec/executor.h"

namespace mt {

Status validate(const TrainOptions& o, const ModelConfig& cfg) {
  auto bad = [](const std::string& f, long v, const std::string& why) {
    return invalid_argument(f + " = " + std::to_string(v) + " " + why);
  };
  if (o.seq_len < 1) return bad("seq_len", o.seq_len, "must be >= 1");
  if (o.micro_batch < 1) return bad("micro_batch", o.micro_batch, "must be >= 1");
  if (o.global_batch < 1) return bad("global_batch", o.global_batch, "must be >= 1");
  if (o.global_batch % o.micro_batch != 0)
    return bad("global_batch", o.global_batch, "must be a multiple of micro_batch (" + std::to_string(o.micro_batch) + ")");
  if (o.head_chunk < 1) return bad("head_chunk", o.head_chunk, "must be >= 1");
  if (o.schedule.warmup_steps < 0) return bad("schedule.warmup_steps", o.schedule.warmup_steps, "must be >= 0");
  if (!(o.schedule.min_lr_ratio >= 0 && o.schedule.min_lr_ratio <= 1))
    return invalid_argument("schedule.min_lr_ratio = " + std::to_string(o.schedule.min_lr_ratio) + " must be in [0, 1]");
  (void)cfg;
  return validate(o.optimizer);
}

Status check_step_batch(const Batch& batch, const TrainOptions& o, int vocab) {
  if (batch.num_seqs != o.global_batch || batch.seq_len != o.seq_len)
    return invalid_argument("batch of " + std::to_string(batch.num_seqs) + "x" + std::to_string(batch.seq_len) +
                            " sequences does not match global_batch x seq_len = " + std::to_string(o.global_batch) +
                            "x" + std::to_string(o.seq_len));
  return validate_batch(batch, vocab);
}

Result<StepStats> open_step(const Batch& batch, const TrainOptions& o, int vocab, long steps_done) {
  MT_RETURN_IF_ERROR(check_step_batch(batch, o, vocab));
  StepStats st;
  st.step = steps_done + 1;
  st.tokens = long(batch.inputs.size());
  st.lr = o.schedule.at(o.optimizer.lr, steps_done);
  return st;
}

}  // namespace mt

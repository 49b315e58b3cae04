#include "engine/exec/executor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

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
  if (o.seq_len > TrainLimits::kSeqLen) return bad("seq_len", o.seq_len, "exceeds the limit of " + std::to_string(TrainLimits::kSeqLen));
  if (o.global_batch > TrainLimits::kBatch)
    return bad("global_batch", o.global_batch, "exceeds the limit of " + std::to_string(TrainLimits::kBatch));
  if (int64_t(o.global_batch) * o.seq_len > TrainLimits::kTokensPerStep)
    return invalid_argument("global_batch x seq_len = " + std::to_string(int64_t(o.global_batch) * o.seq_len) +
                            " tokens per step exceeds the limit of " + std::to_string(TrainLimits::kTokensPerStep));
  if (o.head_chunk < 1) return bad("head_chunk", o.head_chunk, "must be >= 1");
  if (o.token_chunk < 0) return bad("token_chunk", o.token_chunk, "must be >= 0 (0: chosen by the planner)");
  if (o.schedule.warmup_steps < 0) return bad("schedule.warmup_steps", o.schedule.warmup_steps, "must be >= 0");
  if (!(o.schedule.min_lr_ratio >= 0 && o.schedule.min_lr_ratio <= 1))
    return invalid_argument("schedule.min_lr_ratio = " + std::to_string(o.schedule.min_lr_ratio) + " must be in [0, 1]");
  (void)cfg;
  return validate(o.optimizer);
}

Result<Precision> parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  return invalid_argument("precision = '" + name + "' is not one of fp32, bf16");
}

Result<Precision> resolve_precision(const std::string& name, bool cuda) {
  if (name == "auto") return cuda ? Precision::kBf16 : Precision::kFp32;
  return parse_precision(name);
}

Status check_devices(int devices, const TrainOptions& opt, int processes) {
  if (devices < 1 || devices > 64) return invalid_argument("devices = " + std::to_string(devices) + ": must be in [1, 64]");
  if (opt.micro_batch < 1) return invalid_argument("micro_batch = " + std::to_string(opt.micro_batch) + " must be >= 1");
  if (opt.global_batch < 1) return invalid_argument("global_batch = " + std::to_string(opt.global_batch) + " must be >= 1");
  const long parts = long(devices) * processes;
  if (opt.global_batch % (parts * opt.micro_batch) != 0)
    return invalid_argument("global_batch = " + std::to_string(opt.global_batch) + " does not split into devices = " +
                            std::to_string(devices) + (processes > 1 ? " x processes = " + std::to_string(processes) : "") +
                            " shards of whole micro-batches (micro_batch = " + std::to_string(opt.micro_batch) +
                            "): make it a multiple of " + std::to_string(parts * opt.micro_batch));
  return Status::Ok();
}

Status check_step_batch(const Batch& batch, const TrainOptions& o, int vocab) {
  if (batch.num_seqs != o.global_batch || batch.seq_len != o.seq_len)
    return invalid_argument("batch of " + std::to_string(batch.num_seqs) + "x" + std::to_string(batch.seq_len) +
                            " sequences does not match global_batch x seq_len = " + std::to_string(o.global_batch) +
                            "x" + std::to_string(o.seq_len));
  return validate_batch(batch, vocab);
}

Status check_eval_batch(const Batch& batch, const TrainOptions& o, int max_rows, int vocab) {
  if (batch.seq_len != o.seq_len || batch.num_seqs < o.micro_batch || batch.num_seqs > max_rows ||
      batch.num_seqs % o.micro_batch != 0)
    return invalid_argument("evaluation batch of " + std::to_string(batch.num_seqs) + "x" +
                            std::to_string(batch.seq_len) + " sequences: it needs seq_len " + std::to_string(o.seq_len) +
                            " and a multiple of micro_batch " + std::to_string(o.micro_batch) + " rows, at most " +
                            std::to_string(max_rows));
  return validate_batch(batch, vocab);
}

Result<StepStats> open_step(const Batch& batch, const TrainOptions& o, int vocab, long steps_done) {
  MT_RETURN_IF_ERROR(check_step_batch(batch, o, vocab));
  return step_stats_for(batch, o, steps_done);
}

StepStats step_stats_for(const Batch& batch, const TrainOptions& o, long steps_done) {
  StepStats st;
  st.step = steps_done + 1;
  st.tokens = long(batch.inputs.size());
  st.lr = o.schedule.at(o.optimizer.lr, steps_done);
  return st;
}

namespace {
std::string number_text(double v) {
  if (std::isnan(v)) return "nan";  // not "-nan": the sign of a NaN means nothing
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}
std::string unit_label(const ParamSchema& u) {
  if (u.kind == UnitKind::kDecoder) return "decoder layer " + std::to_string(u.layer);
  return unit_kind_name(u.kind);
}
}  // namespace

Status check_step_loss(long step, double loss) {
  if (std::isfinite(loss)) return Status::Ok();
  return failed_precondition("step " + std::to_string(step) + ": the loss is not finite (" + number_text(loss) +
                             "); the update was not applied");
}

Status check_eval_loss(const EvalStats& e) {
  if (std::isfinite(e.loss_sum)) return Status::Ok();
  return failed_precondition("the evaluation loss is not finite (" + number_text(e.loss_sum) +
                             "): the model's weights hold non-finite values, or its activations overflow");
}

Status check_grad_norm(long step, double norm, const std::vector<double>& unit_sumsq,
                       const std::vector<ParamSchema>& units) {
  if (std::isfinite(norm)) return Status::Ok();
  std::string where;
  for (size_t u = 0; u < unit_sumsq.size() && u < units.size() && where.empty(); ++u)
    if (!std::isfinite(unit_sumsq[u])) where = "; first non-finite gradient in unit " + std::to_string(u) + " (" + unit_label(units[u]) + ")";
  return failed_precondition("step " + std::to_string(step) + ": the gradient norm is not finite (" + number_text(norm) + ")" +
                             where + "; the update was not applied");
}

}  // namespace mt

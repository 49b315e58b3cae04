// Where a run starts (job_start.h): its first state and its data position.
#include "engine/job/job_start.h"

#include "engine/io/checkpoint.h"
#include "engine/io/hf_io.h"
#include "engine/job/job_data.h"
#include "engine/model/config_keys.h"

namespace mt {

namespace {

// `steps` is the LR schedule's span, so resuming with another one would silently change the
// learning rate of every remaining step; refused unless the schedule is constant.
Status check_schedule_span(const JobSpec& spec, const TrainerState& st, const std::string& dir) {
  if (st.total_steps <= 0 || st.total_steps == spec.steps || spec.train.schedule.decay == LrDecay::kConstant)
    return Status::Ok();
  return invalid_argument("steps = " + std::to_string(spec.steps) + " differs from the steps = " +
                             std::to_string(st.total_steps) + " of the run that wrote checkpoint '" + dir +
                             "'; its " + lr_decay_name(spec.train.schedule.decay) +
                             " LR schedule spans that many steps and resuming would change it. Resume with steps = " +
                             std::to_string(st.total_steps) +
                             ", or start a new run with init.from pointing at the checkpoint");
}

// init.from another run's training checkpoint, continued (not weights_only): this spec's steps
// count from that run's start, so a span it has already reached would train nothing.
Status check_continued_span(const JobSpec& spec, const TrainerState& st, const std::string& dir) {
  if (st.step < spec.steps) return Status::Ok();
  return invalid_argument("init.from '" + dir + "' is at step " + std::to_string(st.step) +
                          " and continues its run, whose steps count from its start: steps = " +
                          std::to_string(spec.steps) + " would train nothing. Set steps above " +
                          std::to_string(st.step) + " to train on, or init.weights_only: true to start a new run "
                          "at step 0 from its weights");
}

// The keys of a config.json that make the model being trained (config_keys.h; not the
// initializer's range, which a resumed run does not use), as model_config_to_json writes them.
Json model_keys(const ModelConfig& cfg) {
  Json j = model_config_to_json(cfg);
  std::erase_if(j.members(),
                [](const auto& kv) { return !is_read_config_key(kv.first) || kv.first == "initializer_range"; });
  return j;
}

// Where the model `dir`'s config.json describes (read by this build) differs from `cfg`, key by
// key and numbers by value (a file re-saved, keys sorted, 8.0 written 8, is the same); empty
// when they agree or `dir` has none (older checkpoints).
Result<std::string> model_changes(const ModelConfig& cfg, const std::string& dir) {
  Result<ModelConfig> saved = load_model_config(dir);
  if (saved.status().code() == StatusCode::kNotFound) return std::string();
  MT_RETURN_IF_ERROR(saved.status());
  return spec_differences(model_keys(*saved), model_keys(cfg));
}

// The model a checkpoint was trained as against the one this spec names now: the spec hashes
// the path of model.hf_config, not the file, so a file edited between runs (rope_theta,
// hidden_act) would go on silently as another model.
Status check_same_model(const ModelConfig& cfg, const std::string& dir) {
  MT_ASSIGN_OR_RETURN(const std::string changed, model_changes(cfg, dir));
  if (changed.empty()) return Status::Ok();
  return invalid_argument("checkpoint '" + dir + "' was trained as another model than the spec's config names now: " +
                          changed + " (a key the file leaves out takes this build's default: write the checkpoint's "
                          "value into the file to go on as it was trained); resume with the model it was trained as, "
                          "or start another run (--out) from it with init.from");
}

// This spec resumes the run whose checkpoint `saved` is: the same spec (an older checkpoint keeps
// only its hash), the same model and the same LR schedule span.
Status check_resumable(const JobSpec& spec, const ModelConfig& cfg, const TrainerState& saved, const std::string& dir) {
  if (saved.spec_hash != job_spec_hash(spec)) {
    const std::string what = saved.spec.is_object() ? ": " + spec_differences(saved.spec, job_spec_hashed_json(spec)) : "";
    return invalid_argument("checkpoint '" + dir + "' was written by a different job spec" + what + " (hash " +
                            saved.spec_hash + ", this spec " + job_spec_hash(spec) +
                            "); resume with the spec it was written by, or start another run (--out) from it with "
                            "init.from");
  }
  MT_RETURN_IF_ERROR(check_same_model(cfg, dir));
  return check_schedule_span(spec, saved, dir);
}

// Other ids for the same text would train the embedding rows on other tokens. Compared when both
// the checkpoint's data and this run's have a known tokenizer (jsonl, or shards whose manifest
// records it); ids given as such name none.
Status check_same_tokenizer(const JobSpec& spec, const TrainerState& saved, const std::string& tokenizer,
                            const std::string& what) {
  if (saved.tokenizer.empty() || tokenizer.empty() || saved.tokenizer == tokenizer) return Status::Ok();
  const std::string name = spec.data.source == "shards" ? "the tokenizer that made data.path's shards"
                           : "data.tokenizer '" + (spec.data.tokenizer.empty() ? "byte" : spec.data.tokenizer) + "'";
  return invalid_argument(name + " does not tokenize as the tokenizer " + what +
                          " was trained with did (other ids for the same text: the model would learn other tokens). "
                          "Use that tokenizer, or start a new run from its weights (init.weights_only: true) if the "
                          "change is meant");
}

}  // namespace

// hf_model names a model's config and its weights: a run of it from random weights was a silent
// surprise (a defect hunt found it).
std::string initial_weights(const JobSpec& spec) {
  return !spec.init.from.empty() ? checkpoints_of_run(spec.init.from) : spec.model.hf_model;
}

// The run's first state: fresh, from an HF directory, resumed from its own checkpoint, or from
// another run's (continued, or its weights alone); `resumed` names the job's own checkpoint it
// resumes. A checkpoint's trainer_state.json is checked before its tensors are read.
Result<TrainerState> initialise(const JobSpec& spec, const ModelConfig& cfg, const std::string& ckpt_root,
                                Executor& ex, std::string& resumed, const std::string& tokenizer) {
  const std::string from = is_training_checkpoint(ckpt_root) ? ckpt_root : initial_weights(spec);
  if (from.empty()) {
    init_weights(cfg, ex.store(), spec.init.seed);
    return TrainerState{};
  }
  if (!is_training_checkpoint(from)) {
    init_weights(cfg, ex.store(), spec.init.seed);  // zero optimizer state, then HF weights
    MT_RETURN_IF_ERROR(load_hf_weights(from, cfg, ex.store()));
    return TrainerState{};
  }
  MT_ASSIGN_OR_RETURN(std::string dir, resolve_checkpoint(from));
  const bool resume = from == ckpt_root;
  if (!resume && (spec.init.weights_only || spec.init.from.empty())) {  // its weights alone: a new run
    MT_RETURN_IF_ERROR(load_checkpoint(dir, cfg, ex.store(), CheckpointParts::kWeights).status());
    return TrainerState{};
  }
  MT_ASSIGN_OR_RETURN(TrainerState saved, read_trainer_state(dir));
  MT_RETURN_IF_ERROR(resume ? check_resumable(spec, cfg, saved, dir) : check_continued_span(spec, saved, dir));
  MT_RETURN_IF_ERROR(check_same_tokenizer(spec, saved, tokenizer, resume ? "checkpoint '" + dir + "'"
                                                                          : "init.from '" + spec.init.from + "'"));
  MT_ASSIGN_OR_RETURN(TrainerState st, load_checkpoint(dir, cfg, ex.store()));
  if (resume) resumed = dir;
  ex.set_steps_done(st.step);
  return st;
}

std::string initial_model_warning(const JobSpec& spec, const ModelConfig& cfg) {
  const std::string from = initial_weights(spec);
  if (from.empty()) return "";
  const auto dir = is_training_checkpoint(from) ? resolve_checkpoint(from) : Result<std::string>(from);
  const auto changed = dir.ok() ? model_changes(cfg, *dir) : Result<std::string>(std::string());
  if (!changed.ok() || changed->empty()) return "";
  return "the weights of " + *dir + " were trained as another model than the one this run trains (" + *changed +
         "): the run trains its spec's model from them (meant when extending the context, say; else name that "
         "model's config)";
}

// Where the data starts. A resume continues at its checkpoint's position, over data that changed
// (a file rewritten in place) too, but not silently. init.from another run's checkpoint continues
// at that run's position only in the same data: in other data that position means nothing (it
// would skip rows, or epochs), so the run reads it from the start. A push job's description
// counts what is spooled, so it always differs; a new push job's spool starts empty.
DataStart data_start(const JobSpec& spec, const TrainerState& st, const std::string& resumed,
                     const std::string& now) {
  const bool known = spec.data.source != "push" && !st.data_source.empty();  // older checkpoints lack it
  const bool same = known && same_data_description(st.data_source, now);
  if (!resumed.empty())
    return {st.data_cursor, !known || same ? "" : "the data is not what " + resumed + " was trained on: it was " +
                                                       st.data_source + ", now " + now +
                                                       "; resuming at its data position all the same"};
  const bool unknown = spec.data.source != "push" && st.data_source.empty();  // continued, as before
  // The position counts rows of seq_len tokens (packed rows of it): in rows of another length
  // it would skip data or train some twice.
  const Json* rows = st.spec.is_object() ? st.spec.find("seq_len") : nullptr;
  const bool other_rows = rows && rows->is_integer() && rows->as_int() != spec.train.seq_len;
  if (other_rows && st.data_cursor > 0)
    return {0, "init.from " + spec.init.from + " read its data in rows of " + std::to_string(rows->as_int()) +
                   " tokens, this run in rows of " + std::to_string(spec.train.seq_len) +
                   ": it reads the data from its first row, not at that run's data position"};
  if (same || unknown || st.data_cursor == 0) return {st.data_cursor, ""};
  return {0, "the data is not what " + spec.init.from + " was trained on (" + st.data_source +
                 "): this run reads it from its first row, not at that run's data position"};
}

}  // namespace mt

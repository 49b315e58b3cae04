// Where a run starts: its first state — fresh, from a Hugging Face directory, resumed from its
// own checkpoint, or from another run's (continued, or its weights alone) — and where in its data
// it starts reading.
#pragma once
#include <cstdint>
#include <string>

#include "engine/exec/executor.h"
#include "engine/io/checkpoint.h"
#include "engine/job/job.h"

namespace mt {

// Where a run that does not resume takes its weights: init.from's checkpoints or directory, else
// model.hf_model's directory (hf_config names the architecture alone); empty: init.seed's.
std::string initial_weights(const JobSpec& spec);

// A new run's warning when its weights (initial_weights) come with a config.json that describes
// another model than the spec's — a RoPE base, norm epsilon or activation the weights were not
// trained with — naming each key "was -> now"; empty when they agree. A resume is refused instead.
std::string initial_model_warning(const JobSpec& spec, const ModelConfig& cfg);

// `ckpt_root` holds the job's own checkpoints; `resumed` is set to the one it resumes, if any.
// `tokenizer` is the data's data_tokenizer_fingerprint: a checkpoint trained on a tokenizer that
// tokenizes otherwise is refused (before its tensors are read) when both have one.
Result<TrainerState> initialise(const JobSpec& spec, const ModelConfig& cfg, const std::string& ckpt_root,
                                Executor& ex, std::string& resumed, const std::string& tokenizer);

struct DataStart {
  uint64_t cursor = 0;
  std::string warning;  // empty: nothing to say
};
// `st` is initialise()'s, `resumed` its resumed checkpoint, `now` the data's description.
DataStart data_start(const JobSpec& spec, const TrainerState& st, const std::string& resumed, const std::string& now);

}  // namespace mt

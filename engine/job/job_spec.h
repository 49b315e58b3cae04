// JobSpec: everything a training job needs, as a plain struct (the server converts its proto
// to this through JSON; the CLI reads YAML/JSON into it). Parsing rejects unknown keys and
// names the key and value of every error.
#pragma once
#include <cstdint>
#include <string>

#include "engine/exec/executor.h"
#include "engine/optim/nvme_tier.h"
#include "engine/base/json.h"

namespace mt {

struct ModelSpec {
  std::string preset;     // a built-in preset name, or
  std::string hf_config;  // a config.json path (random init), or
  std::string hf_model;   // an HF model directory (config + safetensors): its weights unless init.from
};

struct InitSpec {
  uint64_t seed = 1;
  std::string from;  // HF model dir or training checkpoint dir to start from
  // from a training checkpoint: false continues its run (AdamW moments, step count, data
  // position); true takes its weights alone, as from an HF directory: step 0, moments 0, the
  // data from its start.
  bool weights_only = false;
};

struct DataSpec {
  std::string source = "synthetic";  // synthetic | text | tokens | push | jsonl | shards
  std::string path;                  // text, tokens, jsonl (a file), shards (a directory or file)
  std::string dtype = "uint16";      // tokens: uint16 | uint32
  uint64_t seed = 1;                 // synthetic; jsonl and shards: the shuffle of each epoch
  int active_vocab = 64;             // synthetic
  int branching = 4;                 // synthetic
  // End-of-document token (any source): the token after it starts a new document, so
  // attention is masked per document and positions restart. -1: rows are single documents.
  int64_t eod_id = -1;
  // jsonl and shards (docs/DATA.md): examples tokenized ahead of training, shuffled per epoch,
  // packed into seq_len rows (or padded), the loss only where the example's mask is 1.
  // jsonl: a model directory, a tokenizer.json, or byte. Unset (empty): byte, but only for a model
  // of 256 tokens; any other model is refused (it would train on byte ids without saying so).
  std::string tokenizer;
  std::string format = "auto";        // jsonl: auto | text | prompt_completion | messages
  std::string chat_template = "auto"; // jsonl: a built-in template name, or auto
  bool packing = true;                // false: one example per row, padded
  std::string long_examples = "split";  // split | truncate: an example longer than seq_len
  uint64_t epochs = 0;                // 0: unbounded; N: the job ends when N epochs are trained
};

// What a job records besides its log (not part of job_spec_hash: the trajectory is the same).
struct LoggingSpec {
  bool tensorboard = false;  // event files under the job directory's tensorboard/ (engine/io/tensorboard.h)
};

struct CheckpointPolicy {
  long every = 0;  // steps between checkpoints; 0: only at the end and on cancel
  int keep = 2;    // checkpoints retained
  // With eval: also keep the checkpoint of the lowest held-out loss (an evaluation that improves
  // on every earlier one writes a checkpoint at its step), whatever `keep` would prune.
  bool keep_best = false;
};

// Held-out evaluation (engine/job/held_out.h): every `every` steps and at the end, the mean loss
// per counted target of the current weights over a fixed held-out set, forward only. Not part of
// job_spec_hash: it does not change the trajectory.
struct EvalSpec {
  static constexpr int64_t kDefaultTokens = int64_t(1) << 20;
  static constexpr int64_t kMaxTokens = int64_t(1) << 26;  // 12 bytes of host memory each
  bool enabled = false;  // the spec has an `eval` section
  DataSpec data;         // any source but push, with its own path, tokenizer and format
  long every = 0;        // steps between evaluations; 0: only at the end of the run
  // The set's first max_tokens token slots (whole rows of seq_len, at least one), read once
  // when the job starts, in one pass over eval.data in its own fixed order.
  int64_t max_tokens = kDefaultTokens;
};

// Weight slots a streaming job may ask for: more than a handful buys nothing, and each is a
// device buffer the size of the largest unit.
inline constexpr int kMaxSlots = 64;

struct JobSpec {
  std::string name = "job";
  ModelSpec model;
  InitSpec init;
  DataSpec data;
  TrainOptions train;
  long steps = 100;
  CheckpointPolicy checkpoint;
  EvalSpec eval;
  LoggingSpec logging;
  std::string precision = "auto";  // auto | bf16 | fp32
  std::string backend = "auto";    // auto | cpu | cuda
  std::string executor = "streaming";  // streaming | resident
  int slots = 2;                   // streaming weight slots (K >= 2)
  int expert_slots = 2;            // a mixture of experts: the device slots experts stream through
  double link_gbps = 0;            // CPU backend: emulated link bandwidth per direction, 0 = off
  static constexpr double kMinLinkGbps = 1e-3, kMaxLinkGbps = 1e4;
  std::string checkpoint_placement = "auto";  // auto | device | host (layer-input checkpoints)
  // off | auto | on (engine/exec/planner.h Speculation): streaming updates before the step's
  // norm is known, exact either way; not part of job_spec_hash.
  std::string speculative_updates = "off";
  // Data parallelism (engine/exec/data_parallel_executor.h; resident_executor.h for executor =
  // resident): devices of this process, each taking global_batch / devices of every step over
  // one HostStore. Not part of job_spec_hash: a checkpoint resumes on another device (or rank) count.
  int devices = 1;
  // The longest a device or rank waits for the others in one collective before the job fails,
  // naming the ones that did not arrive (engine/dist/communicator.h).
  double comm_timeout_seconds = 300;
  // Several processes (mpirun): each holds the Adam state of its share of the units and updates
  // only those, then sends their weights to the others (engine/optim/optimizer_shards.h) — host
  // bytes per node 8 + 8/R per parameter instead of 16. Checkpoints are then written by every
  // process, with an index. Not part of job_spec_hash: a checkpoint resumes either way.
  bool shard_optimizer = false;
  // The daemon's scheduling priority (higher runs first); not part of the trajectory, so not
  // of job_spec_hash: the local `train` reads and ignores it.
  int priority = 0;
  // memory.offload: "none", or "nvme": the NVMe tier (engine/optim/nvme_tier.h) holds the
  // decoders' and experts' Adam moments — with nvme.masters their fp32 masters too — in scratch
  // files on nvme.paths (memory.nvme_paths; the daemon resolves them under its allowed roots and
  // without any uses its --nvme_paths). The same bits as in memory, so not part of job_spec_hash.
  std::string offload = "none";
  NvmeTierOptions nvme;   // paths, masters, window, io_threads
  double nvme_gbps = 0;   // the drives' bandwidth together, for the plan's verdict (0: not known)
};

// JSON (snake_case keys as in DESIGN.md §5) to JobSpec and back.
Result<JobSpec> job_spec_from_json(const Json& j);
Json job_spec_to_json(const JobSpec& s);
Status validate(const JobSpec& s);
// A jsonl source with no tokenizer reads bytes: refused for a model whose vocabulary is not 256
// (it would train on byte ids without saying so). `field` names the tokenizer in the message.
Status check_unset_tokenizer(const std::string& field, const DataSpec& d, int vocab);
// What a job's sources (data, and eval.data when evaluating) need of the model, named as the spec
// names them: check_unset_tokenizer, and an eod_id inside its vocabulary. At submit, not when the
// job starts.
Status check_data_fits_model(const JobSpec& s, int vocab);
// The fields that define the training trajectory (what job_spec_hash hashes; a checkpoint keeps
// them so that a resume refused for a different spec can say which fields differ).
Json job_spec_hashed_json(const JobSpec& s);
// A stable hash of the fields that define the training trajectory (checked on resume).
std::string job_spec_hash(const JobSpec& s);
// Where two hashed specs differ: "optimizer.lr 0.003 -> 0.01, seq_len 64 -> 32" (at most `max`).
std::string spec_differences(const Json& was, const Json& now, size_t max = 8);

}  // namespace mt

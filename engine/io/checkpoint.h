// Training checkpoints: weights, optimizer state and trainer state in one directory, written
// atomically (temp dir, fsync files and dir, rename), keep-last-K retention, and a `latest`
// pointer updated last. A failed write leaves the previous checkpoint intact and current.
//   ROOT/step-00000100/{model.safetensors, optimizer.safetensors, trainer_state.json, config.json}
//   ROOT/latest   (text: "step-00000100")
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/optim/host_store.h"
#include "engine/model/model_config.h"
#include "engine/base/json.h"
#include "engine/base/status.h"

namespace mt {

// A job's held-out evaluations so far (engine/job/held_out.h): the latest and the lowest.
// Steps 0: none yet.
struct EvalProgress {
  long step = 0;
  double loss = 0;
  long best_step = 0;
  double best_loss = 0;
  // An evaluation after `at` steps; true when it is the lowest so far (ties: the earlier).
  bool record(long at, double value);
};
// Its keys eval_step, eval_loss, best_eval_step, best_eval_loss into `j` (none without an
// evaluation, as before they existed: trainer states and the daemon's job records), and back.
void eval_progress_to_json(const EvalProgress& e, Json& j);
EvalProgress eval_progress_from_json(const Json& j);

struct TrainerState {
  long step = 0;              // optimizer steps completed
  uint64_t data_cursor = 0;   // DataSource::cursor() after the last consumed batch
  std::string spec_hash;      // job_spec_hash of the job that wrote it
  Json spec;                  // what it hashed (job_spec_hashed_json); null in older checkpoints
  std::string data_source;    // DataSource::describe(), informational
  // The training data's tokenizer by what it does (job_data.h, data_tokenizer_fingerprint): a
  // run goes on from this checkpoint only with one that tokenizes alike. Empty: pre-tokenized
  // data, or an older checkpoint.
  std::string tokenizer;
  double last_loss = 0;
  long total_steps = 0;       // the job's `steps` (the LR schedule's span); 0: unknown (older checkpoint)
  EvalProgress eval;  // the latest evaluation (at `step` itself when it evaluated there), the best
  // A mixture of experts: each expert's AdamW updates so far (HostStore::expert_updates; an expert
  // is updated only on the steps that route it a token); empty for a dense model.
  std::vector<long> expert_updates;
};

// Told each unit, in the store's update order, once the writer holds its bytes (copied out of the
// store: the unit may change from then on). Called from the writer's threads, once per unit.
using UnitCaptured = std::function<void(size_t unit)>;

// Replaces the trainer_state.json of the checkpoint `dir` (of state.step, published) with
// `state`'s (temp, rename, directory synced): an evaluation made at that step after it was written
// (a run that goes on to make the one a stop cut short) is the checkpoint's from then on.
Status update_trainer_state(const std::string& dir, const TrainerState& state, const HostStore& store);

// Writes a checkpoint of `store` under root and prunes to `keep` newest, besides the checkpoint
// of step `also_keep` (checkpoint.keep_best: the best held-out loss; 0: none). Returns its directory.
// The units go into both files in the store's update order, the two files written at once, so
// `captured` hears of them in that order (checkpoint_in_flight.h: training goes on meanwhile).
Result<std::string> save_checkpoint(const std::string& root, const ModelConfig& cfg, const HostStore& store,
                                    const TrainerState& state, int keep, long also_keep = 0,
                                    const UnitCaptured& captured = nullptr);

// The optimizer sharded over processes (optimizer_shards.h): no process holds all the Adam state,
// so each writes its own units' as optimizer-RRRRR-of-NNNNN.safetensors (1-based, as Hugging Face
// names shards), and optimizer.safetensors.index.json names the file of every tensor. The steps,
// in this order, with every process done with one before any starts the next (the caller's
// barrier): rank 0 begins (a fresh temp directory); every rank writes its shard into it; rank 0
// finishes (weights, trainer state, index; the same atomic publish as save_checkpoint), or
// discards it if any rank failed. load_checkpoint reads either form, for any process count.
Status begin_checkpoint(const std::string& root, long step);
Status write_optimizer_shard(const std::string& root, long step, const ModelConfig& cfg, const HostStore& store,
                             int rank, int ranks);
Result<std::string> finish_sharded_checkpoint(const std::string& root, const ModelConfig& cfg, const HostStore& store,
                                              const TrainerState& state, int keep, int ranks, long also_keep = 0);
void discard_checkpoint(const std::string& root, long step);
// Removes what a process killed while writing checkpoints left under `root`: every temp directory
// (ROOT/.tmp-step-*, of any step: a pause or preemption checkpoints off the `every` grid) and a
// half-written `latest` (ROOT/.latest.tmp). None of them is a checkpoint. The process that writes
// checkpoints calls it when a job starts or resumes, before it writes one. Returns what it removed.
std::vector<std::string> remove_stale_checkpoint_temps(const std::string& root);

// ROOT/step-XXXXXXXX: where the checkpoint of `step` is published.
std::string checkpoint_step_dir(const std::string& root, long step);
// The step of a directory named step-NNNNNNNN (the name, not a path), or -1.
long parse_step_dir(const std::string& name);

// True when `path` is a training checkpoint: a step directory (trainer_state.json) or a
// checkpoints root (`latest`, or a complete step directory). Anything else is taken for an HF
// model directory.
bool is_training_checkpoint(const std::string& path);

// A run's directory (`megatrain train --out DIR`, a daemon job's directory) stands for its
// checkpoints root DIR/checkpoints, where DIR is no checkpoint itself and that root is one; any
// other path is returned as it is. For the commands that read a checkpoint (inspect, export, eval,
// init.from), so that the directory a user trained into is accepted as it is.
std::string checkpoints_of_run(const std::string& path);

// Resolves ROOT (via `latest`; without it, its newest complete step directory) or a step
// directory to the checkpoint directory.
Result<std::string> resolve_checkpoint(const std::string& path);

// One complete checkpoint under a root (what ListCheckpoints reports).
struct CheckpointInfo {
  long step = 0;
  double loss = 0;          // trainer_state.json's last_loss
  uint64_t size_bytes = 0;  // every file in the directory
  int64_t unix_ms = 0;      // when it was written: trainer_state.json's mtime
  std::string dir;
  bool latest = false;      // the one `latest` names
  bool evaluated = false;   // a held-out evaluation ran at its step: eval_loss is its loss
  double eval_loss = 0;
  bool best = false;        // the lowest held-out loss so far, as the latest checkpoint records it
};
// The complete checkpoints under `root`, steps ascending; none when root does not exist. A
// checkpoint being written (a temp directory) or one without a readable trainer_state.json is
// not listed.
Result<std::vector<CheckpointInfo>> list_checkpoints(const std::string& root);

// What load_checkpoint reads: everything (a resume; init.from continuing a run), or the weights
// alone (init.weights_only): the optimizer's files are not opened, and the store's moments and
// experts' update counts are zeroed.
enum class CheckpointParts { kAll, kWeights };

// Loads weights and optimizer state into `store` (shapes checked against cfg); the Adam state of
// the units the store holds it for (all, unless sharded).
Result<TrainerState> load_checkpoint(const std::string& dir, const ModelConfig& cfg, HostStore& store,
                                     CheckpointParts parts = CheckpointParts::kAll);
// A checkpoint's trainer_state.json alone (its step, before deciding to load it).
Result<TrainerState> read_trainer_state(const std::string& dir);

}  // namespace mt

// The data a job reads: its sources opened from the spec (make_data_source, declared in job.h),
// and how a resumed run tells whether its data is still what its checkpoint was trained on.
#pragma once
#include <memory>
#include <string>

#include "engine/job/job.h"

namespace mt {

// The spec's training data source; push data comes from the hook (the daemon's spool).
Result<std::unique_ptr<DataSource>> open_job_data(const JobSpec& spec, const JobHooks& hooks, int vocab);

// The held-out examples' ids come from a tokenizer that tokenizes as the training data's does
// (jsonl's data.tokenizer, or the one a shard set's manifest records), else the held-out loss
// measures other ids. Sources of ids given as such name no tokenizer and are not compared.
Status check_eval_tokenizer(const JobSpec& spec);

// What the training data's tokenizer does (jsonl_examples.h: tokenization_fingerprint; for shards
// their manifest's record), as hex; empty where unknown. A run goes on from a checkpoint only
// with the same: other ids for the same text would train the embedding rows on other tokens.
Result<std::string> data_tokenizer_fingerprint(const DataSpec& d);

// A checkpoint's description of its data against the data's now: the same, but for fields a
// later build added (the tokenizer; the vocabulary a shard set was tokenized for; a file's
// sampled contents) when the checkpoint, written before them, lacks them, and for the epoch bound
// (a continued run raises it).
bool same_data_description(const std::string& was, std::string now);

}  // namespace mt

// How the remote commands show the daemon's messages: JSON objects (one per line) and short
// human-readable text.
#pragma once
#include <string>

#include "client/remote/connection.h"
#include "engine/base/json.h"

namespace mt::cli {

std::string state_name(v1::JobState s);  // "running", "succeeded", ...
bool terminal(v1::JobState s);
std::string human_bytes(uint64_t bytes);  // "1.50 GiB"

Json job_to_json(const v1::Job& job, bool with_spec);
Json plan_to_json(const v1::MemoryPlan& plan);  // the keys of `megatrain plan --json` (local)
void print_job_human(const v1::Job& job);
void print_job_row(const v1::Job& job, bool header);
void print_plan_human(const v1::MemoryPlan& plan);

}  // namespace mt::cli

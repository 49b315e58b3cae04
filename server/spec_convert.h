// Proto JobSpec <-> engine JobSpec through the one JSON path (protobuf's JSON mapping with the
// original snake_case names = the engine's job spec keys), path confinement under the allowed
// roots, and the memory plan of a spec against the daemon's budgets.
#pragma once
#include <string>
#include <vector>

#include "engine/job/job_spec.h"
#include "engine/exec/planner.h"
#include "megatrain/v1/trainer.pb.h"

namespace mt::server {

// A job is listed by its name (twice in every Job message): a submitted one is at most this long.
inline constexpr size_t kMaxJobNameBytes = 256;
// And printable, as a directory a client names (an export's out_dir): valid UTF-8 without a
// control character (C0, DEL, C1), which would reach other users' terminals raw, or an invisible
// format character. `field` names it in the refusal.
Status check_printable(const std::string& field, const std::string& text);

// Parses and validates; every path in the spec is resolved (made absolute) under one of
// `roots` and a path that escapes them is refused naming the field and value.
// nvme_roots: megatraind's --nvme_paths, where a job's NVMe tier may put its scratch files
// (besides the first root, the data root).
Result<JobSpec> spec_from_proto(const megatrain::v1::JobSpec& proto, const std::vector<std::string>& roots,
                                const std::vector<std::string>& nvme_roots = {});
Status resolve_spec_paths(JobSpec& spec, const std::vector<std::string>& roots,
                          const std::vector<std::string>& nvme_roots = {});
// At a job's start (after a queue of hours, or a restart): its resolved paths resolve to the same
// places under the roots still. A directory swapped for a symlink since the submit (to outside
// the roots, or elsewhere inside them) fails the job naming the path instead of reading or
// writing where the client may not. The window left is the job's own start to its opens.
Status recheck_spec_paths(const JobSpec& spec, const std::vector<std::string>& roots,
                          const std::vector<std::string>& nvme_roots = {});
// The files a job reads when it starts exist (data.path of text/tokens data, init.from), so a
// job that would fail at start is refused at submit, naming the path. INVALID_ARGUMENT.
Status check_spec_inputs(const JobSpec& spec);
megatrain::v1::JobSpec spec_to_proto(const JobSpec& spec);

struct Budgets {
  uint64_t host = 0, device = 0;  // 0: unlimited
  int devices = 1;                // devices the daemon owns (--devices): a job may ask for up to this many
};
Result<MemoryPlan> plan_job(const JobSpec& spec, const ModelConfig& cfg, const Budgets& budgets);
void plan_to_proto(const MemoryPlan& plan, const Budgets& budgets, megatrain::v1::MemoryPlan* out);

}  // namespace mt::server

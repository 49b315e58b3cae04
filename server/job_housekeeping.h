// Files and listings behind DeleteJob, retention and ListJobs paging: the state directory's
// size, a job directory's crash-safe removal (renamed to jobs/.deleting-ID first, so a daemon
// killed mid-delete finishes it at its next start), the highest job id ever issued (so a
// deleted job's id is never issued again), and ListJobs' opaque page tokens.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

#include "engine/base/disk_usage.h"
#include "engine/base/status.h"

namespace mt::server {


bool is_being_deleted(const std::filesystem::path& job_dir);
// Renames STATE_DIR/jobs/ID to STATE_DIR/jobs/.deleting-ID (synced); the new path.
Result<std::string> detach_job_dir(const std::string& dir);
uint64_t destroy_dir(const std::string& dir);  // remove_all; the bytes it held
// DeleteJob's keep_checkpoints: JOB_DIR/checkpoints moved to DATA_ROOT/checkpoints/ID (never
// through a symlink, never over an existing directory); its new path, or "" when it had none.
Result<std::string> keep_checkpoints_of(const std::string& job_dir, const std::string& data_root, const std::string& id);

long last_issued_id(const std::string& state_dir);  // 0 when none was saved
Status save_last_issued_id(const std::string& state_dir, long n);

// ListJobs page tokens: the last id of a page, wrapped. page_token_id unwraps one and refuses
// (INVALID_ARGUMENT) a token this daemon did not write: malformed, or naming an id that is not
// one of the `issued` job ids it has issued (a token naming a job deleted since stays valid).
std::string page_token_after(const std::string& id);
Result<std::string> page_token_id(const std::string& token, long issued);

}  // namespace mt::server

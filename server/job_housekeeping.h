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

long last_issued_id(const std::string& state_dir);  // 0 when none was saved
Status save_last_issued_id(const std::string& state_dir, long n);

// ListJobs page tokens: the last id of a page, wrapped; tokens this daemon did not write are
// refused (INVALID_ARGUMENT).
std::string page_token_after(const std::string& id);
Result<std::string> page_token_id(const std::string& token);

}  // namespace mt::server

// DeleteJob, retention, ListJobs paging and the state directory's size (see job_manager.h).
#include "server/job_housekeeping.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <stdio.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <cstdlib>

#include "engine/io/safetensors.h"
#include "server/job_manager.h"
#include "server/managed_job.h"

namespace mt::server {

namespace fs = std::filesystem;

namespace {
constexpr const char* kDeleting = ".deleting-";
constexpr const char* kTokenPrefix = "mtp1.";
constexpr int kDefaultPageSize = 100, kMaxPageSize = 1000;
}  // namespace

bool is_being_deleted(const fs::path& job_dir) { return job_dir.filename().string().rfind(kDeleting, 0) == 0; }

Result<std::string> detach_job_dir(const std::string& dir) {
  const fs::path from(dir);
  const fs::path to = from.parent_path() / (kDeleting + from.filename().string());
  std::error_code ec;
  fs::remove_all(to, ec);  // a leftover of an earlier try
  fs::rename(from, to, ec);
  if (ec) return internal_error("cannot remove '" + dir + "': " + ec.message());
  MT_RETURN_IF_ERROR(fsync_dir(from.parent_path().string()));
  return to.string();
}

uint64_t destroy_dir(const std::string& dir) {
  const uint64_t bytes = tree_bytes(dir);
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) spdlog::warn("removing '{}': {} (the next start removes it)", dir, ec.message());
  return bytes;
}

long last_issued_id(const std::string& state_dir) {
  auto text = read_file(state_dir + "/last_job_id");
  return text.ok() ? std::max(0L, std::strtol(text->c_str(), nullptr, 10)) : 0;
}

Status save_last_issued_id(const std::string& state_dir, long n) {
  return write_file_durable(state_dir + "/last_job_id", std::to_string(n) + "\n");
}

std::string page_token_after(const std::string& id) {
  std::string out = kTokenPrefix;
  char hex[3];
  for (unsigned char c : id) {
    std::snprintf(hex, sizeof hex, "%02x", c);
    out += hex;
  }
  return out;
}

Result<std::string> page_token_id(const std::string& token, long issued) {
  const std::string bad = "page_token = '" + token.substr(0, 64) + "' is not a token this daemon wrote";
  const size_t p = std::string(kTokenPrefix).size();
  if (token.rfind(kTokenPrefix, 0) != 0 || token.size() == p || (token.size() - p) % 2 || token.size() > 512)
    return invalid_argument(bad);
  std::string id;
  for (size_t i = p; i < token.size(); i += 2) {
    unsigned v = 0;
    if (std::sscanf(token.c_str() + i, "%2x", &v) != 1 || !std::isxdigit(uint8_t(token[i])) ||
        !std::isxdigit(uint8_t(token[i + 1])) || v < 0x21 || v > 0x7e)
      return invalid_argument(bad);
    id += char(v);
  }
  const long n = job_number(id);
  if (n < 1 || n > issued || job_id(n) != id) return invalid_argument(bad);
  return id;
}

Result<std::string> keep_checkpoints_of(const std::string& job_dir, const std::string& data_root,
                                        const std::string& id) {
  const std::string from = job_dir + "/checkpoints";
  std::error_code ec;
  if (!fs::exists(from, ec)) return std::string();
  auto kept = DirFd::open_beneath(data_root, "checkpoints", true);  // no symlink leads it elsewhere
  if (!kept.ok()) return failed_precondition("keep_checkpoints: " + kept.status().message());
  const std::string to = kept->file(id);
  if (::renameat2(AT_FDCWD, from.c_str(), kept->fd(), id.c_str(), RENAME_NOREPLACE) != 0) {
    const int err = errno;
    if (err == EEXIST) return failed_precondition("keep_checkpoints: '" + to + "' already exists");
    return failed_precondition("keep_checkpoints: cannot move '" + from + "' to '" + to + "': " + std::strerror(err) +
                               " (--data_root must be on the state directory's filesystem)");
  }
  (void)kept->sync();
  return to;
}

// ---- JobManager's housekeeping -------------------------------------------------------------

Result<v1::ListJobsResponse> JobManager::list(const v1::ListJobsRequest& req) {
  if (req.page_size() < 0)
    return invalid_argument("page_size = " + std::to_string(req.page_size()) + " must be >= 0 (0: " +
                            std::to_string(kDefaultPageSize) + ", at most " + std::to_string(kMaxPageSize) + ")");
  if (!v1::JobState_IsValid(req.state()))
    return invalid_argument("state = " + std::to_string(int(req.state())) + " names no job state");
  const int limit = req.page_size() == 0 ? kDefaultPageSize : std::min(req.page_size(), kMaxPageSize);
  // by size too: a page of jobs with long paths in their specs must still fit one reply
  const size_t budget = opt_.max_reply_bytes > 4096 ? opt_.max_reply_bytes - 1024 : opt_.max_reply_bytes;
  std::string after;
  std::lock_guard<std::mutex> lock(mu_);
  if (!req.page_token().empty()) {
    MT_ASSIGN_OR_RETURN(after, page_token_id(req.page_token(), next_id_ - 1));
  }
  auto wanted = [&](const Job& j) {
    return (req.state() == v1::JOB_STATE_UNSPECIFIED || j.rec.state == req.state()) &&
           j.rec.name.find(req.name()) != std::string::npos;
  };
  v1::ListJobsResponse out;
  auto it = after.empty() ? jobs_.begin() : jobs_.upper_bound(after);
  size_t bytes = 0;
  for (; it != jobs_.end(); ++it) {
    if (!wanted(*it->second)) continue;
    v1::Job job = to_proto(*it->second);
    const size_t size = job.ByteSizeLong() + 8;  // its tag and length
    if (out.jobs_size() == limit || (out.jobs_size() > 0 && bytes + size > budget)) {  // a next page
      out.set_next_page_token(page_token_after(out.jobs(out.jobs_size() - 1).id()));
      break;
    }
    bytes += size;
    *out.add_jobs() = std::move(job);
  }
  return out;
}

Result<v1::DeleteJobResponse> JobManager::remove(const std::string& id, bool keep_checkpoints) {
  v1::DeleteJobResponse resp;
  resp.set_job_id(id);
  std::string detached;
  v1::JobEvent ev;
  bool was_live = false;
  std::unique_lock<std::mutex> ordered = order();
  {
    std::lock_guard<std::mutex> lock(mu_);
    MT_ASSIGN_OR_RETURN(auto job, find(id));
    JobRecord& r = job->rec;
    if (running_ == job)
      return failed_precondition("job " + id + " is running" +
                                 (r.pause_requested                ? " (pausing)"
                                  : !job->preempted_by.empty()     ? " (being preempted)"
                                  : job->resumed_while_pausing     ? " (going back to the queue)"
                                                                   : "") +
                                 "; pause or cancel it, and delete it once it has stopped");
    if (keep_checkpoints) {  // first, so a failure leaves the job as it was
      MT_ASSIGN_OR_RETURN(const std::string kept, keep_checkpoints_of(job->dir, opt_.data_root, id));
      resp.set_kept_checkpoints(kept);
    }
    MT_ASSIGN_OR_RETURN(detached, detach(*job));
    if (!r.terminal()) {  // queued or paused: it ends CANCELLED for its watchers
      was_live = true;
      queue_.erase(id);
      job->parked = false;  // a push in flight must not queue it again (unpark_if_fed)
      job->progress->waiting = false;
      r.state = v1::JOB_STATE_CANCELLED;
      r.reason = "deleted by request";
      r.finished_ms = now_ms();
      ev = event_of(*job);
      if (job->log) job->log->close();  // its followers end after the last line (the file is detached, not gone)
    }
    if (job->spool) {
      job->spool->stop();
      metrics_.set_data_queue(id, 0);
    }
    forget(id);
  }
  if (was_live) deliver(ordered, id, ev);
  ordered.unlock();
  resp.set_freed_bytes(destroy_dir(detached));
  spdlog::info("job {} deleted ({} bytes freed{}{})", id, resp.freed_bytes(),
               resp.kept_checkpoints().empty() ? "" : "; checkpoints kept in ", resp.kept_checkpoints());
  refresh_disk_usage();
  return resp;
}

Result<std::string> JobManager::detach(const Job& job) {
  // First, so that a deleted job's id is never issued again, even by a daemon that restarts
  // before the directory is gone and finds no directory for it.
  MT_RETURN_IF_ERROR(save_last_issued_id(opt_.state_dir, next_id_ - 1));
  return detach_job_dir(job.dir);
}

void JobManager::forget(const std::string& id) {
  jobs_.erase(id);
  metrics_.forget_job(id);
  update_job_metrics();
}

void JobManager::sweep_retention() {
  if (opt_.retain_jobs <= 0 && opt_.retain_days <= 0) return;
  std::vector<std::pair<std::string, std::string>> gone;  // id, detached directory
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::shared_ptr<Job>> done;
    for (const auto& [id, job] : jobs_)
      if (job->rec.terminal()) done.push_back(job);
    std::sort(done.begin(), done.end(), [](const auto& a, const auto& b) {  // newest first
      return a->rec.finished_ms != b->rec.finished_ms ? a->rec.finished_ms > b->rec.finished_ms
                                                      : IdOrder()(b->rec.id, a->rec.id);
    });
    const int64_t cutoff = opt_.retain_days > 0 ? now_ms() - int64_t(opt_.retain_days * 86400e3) : INT64_MIN;
    for (size_t i = 0; i < done.size(); ++i) {
      const bool too_many = opt_.retain_jobs > 0 && i >= size_t(opt_.retain_jobs);
      if (!too_many && done[i]->rec.finished_ms >= cutoff) continue;
      auto detached = detach(*done[i]);
      if (!detached.ok()) {
        spdlog::warn("retention: {}", detached.status().to_string());
        continue;
      }
      gone.emplace_back(done[i]->rec.id, *detached);
      forget(done[i]->rec.id);
    }
  }
  for (const auto& [id, dir] : gone) spdlog::info("retention: job {} deleted ({} bytes)", id, destroy_dir(dir));
}

void JobManager::refresh_disk_usage() { metrics_.set_state_dir_bytes(double(tree_bytes(opt_.state_dir))); }

}  // namespace mt::server

// ListCheckpoints and ExportModel: a job's checkpoints (STATE_DIR/jobs/ID/checkpoints) as a list,
// and one of them as a Hugging Face model directory under the data root, written by the same
// engine code as `megatrain export` (engine/io/model_files.h, engine/io/hf_io.h).
#pragma once
#include <atomic>
#include <string>

#include "megatrain/v1/trainer.pb.h"
#include "server/job_manager.h"

namespace mt::server {

Result<megatrain::v1::ListCheckpointsResponse> list_job_checkpoints(const std::string& job_dir);

// out_dir confined to the data root: relative to it, or absolute inside it; refused (naming it)
// with a ".." component. The path as the export opens it (DirFd::open_beneath, which refuses a
// symlink at any component below the root at the moment each is opened).
struct ExportTarget {
  std::string rel;  // below the data root
  std::string abs;  // data_root/rel, for the reply and messages
};
Result<ExportTarget> export_target(const std::string& data_root, const std::string& out_dir);

class Exporter {
 public:
  // Reads the checkpoint into host memory (16 bytes a parameter, counted against the host budget
  // beside the running job's admission) and writes the directory under job.data_root. One export at a time; a second
  // is refused (UNAVAILABLE) rather than queued. A running job's checkpoints may be exported:
  // a listed checkpoint is complete and never written again; if the job's retention removes it
  // before it has been read the export fails (NOT_FOUND or DATA_LOSS) and writes nothing.
  Result<megatrain::v1::ExportModelResponse> run(const JobManager::JobFiles& job,
                                                 const megatrain::v1::ExportModelRequest& req);

 private:
  std::atomic<bool> busy_{false};
};

}  // namespace mt::server

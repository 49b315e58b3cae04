// The remote commands, one short function each; remote.cc dispatches to them.
#pragma once
#include <string>

#include "client/remote/connection.h"

namespace mt::cli {

// A spec file (YAML or JSON) as the proto JobSpec: read with spec_text_to_json, mapped by
// protobuf's JSON parser, which refuses an unknown key naming it.
Result<v1::JobSpec> load_proto_spec(const std::string& path);

int remote_submit(Connection& c, const Args& a);
int remote_list(Connection& c, const Args& a);
int remote_status(Connection& c, const Args& a);
int remote_cancel(Connection& c, const Args& a);
int remote_checkpoint(Connection& c, const Args& a);
int remote_plan(Connection& c, const Args& a);
int remote_watch(Connection& c, const Args& a);
int remote_push(Connection& c, const Args& a);
int remote_pause(Connection& c, const Args& a);
int remote_resume(Connection& c, const Args& a);
int remote_delete(Connection& c, const Args& a);
int remote_logs(Connection& c, const Args& a);
int remote_checkpoints(Connection& c, const Args& a);
int remote_export(Connection& c, const Args& a);  // export --remote ID OUT_DIR

// Follows job `id` until it ends: progress per step, a summary at the end. Exit code: 0 when the
// job succeeded, 1 when it failed or was cancelled, 3 when the daemon went away. `from_start`:
// the steps the daemon still holds first (WatchJobRequest.from_start).
int watch_job(Connection& c, const std::string& id, bool json, bool from_start = false);

}  // namespace mt::cli

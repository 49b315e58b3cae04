// StreamLogs: a log's lines to one client, read from the file as the client takes them (a slow
// client holds one message, never a queue), following new lines while asked to, and ending
// after the last line of a closed log (a job that ended) or when the client cancels.
#pragma once
#include <grpcpp/grpcpp.h>

#include <memory>

#include "megatrain/v1/trainer.grpc.pb.h"
#include "server/log_file.h"
#include "server/stream_slots.h"

namespace mt::server {

// The reactor for one call; it deletes itself (and frees its stream slot) when the call is done.
// A non-OK `refused` (auth, no such job, no slot) finishes the call at once with that status.
grpc::ServerWriteReactor<megatrain::v1::StreamLogsResponse>* stream_logs(
    const grpc::Status& refused, std::shared_ptr<LogFile> log, const megatrain::v1::StreamLogsRequest& req,
    StreamSlots::Slot slot);

}  // namespace mt::server

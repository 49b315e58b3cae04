// The Trainer service on the gRPC callback API: each handler authenticates (token and role),
// converts, calls the job manager and returns a canonical status code whose message names the field and value.
#pragma once
#include "megatrain/v1/trainer.grpc.pb.h"
#include "server/artifacts.h"
#include "server/auth.h"
#include "server/job_manager.h"
#include "server/stream_slots.h"

namespace mt::server {

class TrainerService final : public megatrain::v1::Trainer::CallbackService {
 public:
  // At most max_streams watches and log reads open at once, and as many pushes (stream_slots.h);
  // their counts go to `metrics` (megatrain_streams_open).
  TrainerService(JobManager& jobs, Authenticator auth, int max_streams, Metrics& metrics)
      : jobs_(jobs),
        auth_(std::move(auth)),
        streams_(max_streams, "watches and log reads", [&g = metrics.streams_open("read")](int n) { g.Set(n); }),
        pushes_(max_streams, "pushes", [&g = metrics.streams_open("push")](int n) { g.Set(n); }) {}

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* ctx, const v1::SubmitJobRequest* req,
                                      v1::SubmitJobResponse* resp) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx, const v1::GetJobRequest* req,
                                   v1::Job* resp) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx, const v1::ListJobsRequest* req,
                                     v1::ListJobsResponse* resp) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx, const v1::CancelJobRequest* req,
                                      v1::Job* resp) override;
  grpc::ServerWriteReactor<v1::JobEvent>* WatchJob(grpc::CallbackServerContext* ctx,
                                                   const v1::WatchJobRequest* req) override;
  grpc::ServerReadReactor<v1::PushDataRequest>* PushData(grpc::CallbackServerContext* ctx,
                                                         v1::PushDataResponse* resp) override;
  grpc::ServerUnaryReactor* Checkpoint(grpc::CallbackServerContext* ctx, const v1::CheckpointRequest* req,
                                       v1::CheckpointResponse* resp) override;
  grpc::ServerUnaryReactor* PlanJob(grpc::CallbackServerContext* ctx, const v1::PlanJobRequest* req,
                                    v1::PlanJobResponse* resp) override;
  grpc::ServerUnaryReactor* PauseJob(grpc::CallbackServerContext* ctx, const v1::PauseJobRequest* req,
                                     v1::Job* resp) override;
  grpc::ServerUnaryReactor* ResumeJob(grpc::CallbackServerContext* ctx, const v1::ResumeJobRequest* req,
                                      v1::Job* resp) override;
  grpc::ServerUnaryReactor* DeleteJob(grpc::CallbackServerContext* ctx, const v1::DeleteJobRequest* req,
                                      v1::DeleteJobResponse* resp) override;

  // Logs and artifacts (issue 17). Roles: StreamLogs of a job and ListCheckpoints are `read`;
  // StreamLogs of the daemon's own log and ExportModel `admin`.
  grpc::ServerWriteReactor<v1::StreamLogsResponse>* StreamLogs(grpc::CallbackServerContext* ctx,
                                                               const v1::StreamLogsRequest* req) override;
  grpc::ServerUnaryReactor* ListCheckpoints(grpc::CallbackServerContext* ctx, const v1::ListCheckpointsRequest* req,
                                            v1::ListCheckpointsResponse* resp) override;
  grpc::ServerUnaryReactor* ExportModel(grpc::CallbackServerContext* ctx, const v1::ExportModelRequest* req,
                                        v1::ExportModelResponse* resp) override;

 private:
  // Every unary RPC: authenticate and check the token's role against the one `rpc` needs (a new
  // RPC cannot skip either: the role is a parameter), run `handler`, finish with its status.
  template <typename Handler>
  grpc::ServerUnaryReactor* unary(grpc::CallbackServerContext* ctx, const char* rpc, Role needed, Handler&& handler);

  JobManager& jobs_;
  Authenticator auth_;
  Exporter exporter_;
  StreamSlots streams_, pushes_;
};

}  // namespace mt::server

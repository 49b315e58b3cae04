// Issue 17 (5), 24.8: tokens with roles. A read token may GetJob, ListJobs, WatchJob, PlanJob,
// StreamLogs of a job and ListCheckpoints, as the README says (checked against its text); every
// other RPC refuses it with PERMISSION_DENIED naming the role needed. An admin token (or a token
// file from before roles: one token, no role) may call everything.
#include <cctype>
#include <cstring>
#include <fstream>

#include "tests/server/schedule_util.h"
#include "tests/test_paths.h"

namespace mt::server::testing {
namespace {

const char* kAdmin = "admin-token-0123456789abcdef";
const char* kRead = "read-token-0123456789abcdef";

std::unique_ptr<grpc::ClientContext> as(const std::string& token) {
  auto c = ctx();
  c->AddMetadata("authorization", "Bearer " + token);
  return c;
}

struct Rpc {
  const char* name;
  bool admin_only;
  std::function<grpc::Status(v1::Trainer::Stub&, const std::string& token)> call;
};

// Every RPC of the Trainer service, each with a request that would otherwise reach the job
// manager (a job id that names no job: NOT_FOUND once allowed).
std::vector<Rpc> every_rpc() {
  auto unary = [](auto rpc, auto req, auto resp) {
    return [=](v1::Trainer::Stub& stub, const std::string& token) mutable {
      auto c = as(token);
      return (stub.*rpc)(c.get(), req, &resp);
    };
  };
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = tiny_spec(1);
  v1::PlanJobRequest plan;
  *plan.mutable_spec() = tiny_spec(1);
  v1::GetJobRequest get;
  get.set_job_id("job-999999");
  v1::CancelJobRequest cancel;
  cancel.set_job_id("job-999999");
  v1::CheckpointRequest checkpoint;
  checkpoint.set_job_id("job-999999");
  v1::PauseJobRequest pause;
  pause.set_job_id("job-999999");
  v1::ResumeJobRequest resume;
  resume.set_job_id("job-999999");
  v1::DeleteJobRequest del;
  del.set_job_id("job-999999");
  v1::ListCheckpointsRequest list_ckpts;
  list_ckpts.set_job_id("job-999999");
  v1::ExportModelRequest exp;
  exp.set_job_id("job-999999");
  exp.set_out_dir("export");
  auto stream_logs = [](const std::string& job) {
    return [job](v1::Trainer::Stub& stub, const std::string& token) {
      auto c = as(token);
      v1::StreamLogsRequest req;
      req.set_job_id(job);
      auto reader = stub.StreamLogs(c.get(), req);
      v1::StreamLogsResponse r;
      while (reader->Read(&r)) {
      }
      return reader->Finish();
    };
  };
  return {
      {"SubmitJob", true, unary(&v1::Trainer::Stub::SubmitJob, submit, v1::SubmitJobResponse())},
      {"GetJob", false, unary(&v1::Trainer::Stub::GetJob, get, v1::Job())},
      {"ListJobs", false, unary(&v1::Trainer::Stub::ListJobs, v1::ListJobsRequest(), v1::ListJobsResponse())},
      {"CancelJob", true, unary(&v1::Trainer::Stub::CancelJob, cancel, v1::Job())},
      {"Checkpoint", true, unary(&v1::Trainer::Stub::Checkpoint, checkpoint, v1::CheckpointResponse())},
      {"PlanJob", false, unary(&v1::Trainer::Stub::PlanJob, plan, v1::PlanJobResponse())},
      {"PauseJob", true, unary(&v1::Trainer::Stub::PauseJob, pause, v1::Job())},
      {"ResumeJob", true, unary(&v1::Trainer::Stub::ResumeJob, resume, v1::Job())},
      {"DeleteJob", true, unary(&v1::Trainer::Stub::DeleteJob, del, v1::DeleteJobResponse())},
      {"ListCheckpoints", false,
       unary(&v1::Trainer::Stub::ListCheckpoints, list_ckpts, v1::ListCheckpointsResponse())},
      {"ExportModel", true, unary(&v1::Trainer::Stub::ExportModel, exp, v1::ExportModelResponse())},
      {"StreamLogs", false, stream_logs("job-999999")},  // a job's log: any reader
      {"WatchJob", false,
       [](v1::Trainer::Stub& stub, const std::string& token) {
         auto c = as(token);
         v1::WatchJobRequest req;
         req.set_job_id("job-999999");
         auto reader = stub.WatchJob(c.get(), req);
         v1::JobEvent ev;
         while (reader->Read(&ev)) {
         }
         return reader->Finish();
       }},
      {"PushData", true,
       [](v1::Trainer::Stub& stub, const std::string& token) {
         auto c = as(token);
         v1::PushDataResponse resp;
         auto writer = stub.PushData(c.get(), &resp);
         v1::PushDataRequest chunk;
         chunk.set_job_id("job-999999");
         chunk.add_tokens(1);
         writer->Write(chunk);
         writer->WritesDone();
         return writer->Finish();
       }},
  };
}

struct RoleServer {
  std::string dir;
  DaemonConfig cfg;
  std::unique_ptr<Server> server;
  explicit RoleServer(const std::string& token_file_text) : dir(fresh_dir("roles")), cfg(test_config(dir)) {
    cfg.auth_token_file = dir + "/tokens";
    std::ofstream(cfg.auth_token_file) << token_file_text;
    server = std::make_unique<Server>(cfg);
  }
};

TEST(ServerRole, ReadTokenIsRefusedEveryAdminRpcNamingTheRole) {
  RoleServer s(std::string("# tokens\n") + kAdmin + " admin\n\n" + kRead + "   read  # the dashboard\n");
  ASSERT_TRUE(s.server->stub);
  const auto rpcs = every_rpc();
  ASSERT_EQ(rpcs.size(), size_t(v1::SubmitJobRequest::descriptor()->file()->FindServiceByName("Trainer")->method_count())) << "an RPC is missing from the table";
  for (const Rpc& rpc : rpcs) {
    const grpc::Status st = rpc.call(*s.server->stub, kRead);
    if (rpc.admin_only) {
      EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << rpc.name;
      EXPECT_EQ(st.error_message(), std::string(rpc.name) + " needs role admin; this token has role read");
    } else {
      EXPECT_NE(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << rpc.name << ": " << st.error_message();
      EXPECT_NE(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << rpc.name << ": " << st.error_message();
    }
  }
}

// The README's sentence on the read role names exactly the RPCs a read token may call.
TEST(ServerRole, TheReadmeListsWhatAReadTokenMayCall) {
  auto readme = read_file(std::string(mt::testing_util::source_dir()) + "/README.md");
  ASSERT_TRUE(readme.ok());
  const size_t from = readme->find("`read` may call "), to = readme->find("`admin` may call everything", from);
  ASSERT_NE(from, std::string::npos);
  ASSERT_NE(to, std::string::npos);
  const std::string sentence = readme->substr(from, to - from);
  for (const Rpc& rpc : every_rpc()) {
    // A whole word: "GetJob" and not inside another name.
    bool named = false;
    for (size_t at = sentence.find(rpc.name); at != std::string::npos; at = sentence.find(rpc.name, at + 1)) {
      const size_t end = at + std::strlen(rpc.name);
      named = named || ((at == 0 || !std::isalnum(uint8_t(sentence[at - 1]))) &&
                        (end == sentence.size() || !std::isalnum(uint8_t(sentence[end]))));
    }
    EXPECT_EQ(named, !rpc.admin_only) << rpc.name << (rpc.admin_only ? " is admin-only but the README gives it to read"
                                                                     : " is open to read but the README does not say so");
  }
}

// StreamLogs of the daemon's own log (job_id empty or "daemon") is for admins only.
TEST(ServerRole, TheDaemonsLogNeedsAdmin) {
  RoleServer s(std::string(kAdmin) + " admin\n" + kRead + " read\n");
  ASSERT_TRUE(s.server->stub);
  for (const char* job : {"", "daemon"}) {
    auto c = as(kRead);
    v1::StreamLogsRequest req;
    req.set_job_id(job);
    auto reader = s.server->stub->StreamLogs(c.get(), req);
    v1::StreamLogsResponse r;
    while (reader->Read(&r)) {
    }
    const grpc::Status st = reader->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << "'" << job << "'";
    EXPECT_EQ(st.error_message(), "StreamLogs needs role admin; this token has role read");
    auto ca = as(kAdmin);
    auto admin_reader = s.server->stub->StreamLogs(ca.get(), req);
    while (admin_reader->Read(&r)) {
    }
    EXPECT_TRUE(admin_reader->Finish().ok()) << "'" << job << "'";
  }
}

// PlanJob of a spec that names files under the data root reads them (a defect hunt had a read
// token's plan quote a config.json's values in its refusal): admin's, as submitting it is.
TEST(ServerRole, APlanThatNamesFilesNeedsAdmin) {
  RoleServer s(std::string(kAdmin) + " admin\n" + kRead + " read\n");
  ASSERT_TRUE(s.server->stub);
  std::vector<std::function<void(v1::JobSpec&)>> naming = {
      [](v1::JobSpec& j) { j.mutable_model()->set_hf_config("secret/config.json"); },
      [](v1::JobSpec& j) { j.mutable_model()->set_hf_model("secret"); },
      [](v1::JobSpec& j) { j.mutable_init()->set_from("secret"); },
      [](v1::JobSpec& j) { j.mutable_data()->set_path("secret.txt"); },
      [](v1::JobSpec& j) { j.mutable_eval()->mutable_data()->set_path("secret.txt"); },
      [](v1::JobSpec& j) { j.mutable_memory()->add_nvme_paths("secret"); },
  };
  for (size_t i = 0; i < naming.size(); ++i) {
    v1::PlanJobRequest req;
    *req.mutable_spec() = tiny_spec(1);
    naming[i](*req.mutable_spec());
    v1::PlanJobResponse resp;
    auto c = as(kRead);
    const grpc::Status st = s.server->stub->PlanJob(c.get(), req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << "case " << i << ": " << st.error_message();
    EXPECT_EQ(st.error_message(), "PlanJob needs role admin; this token has role read") << "case " << i;
    auto ca = as(kAdmin);
    EXPECT_NE(s.server->stub->PlanJob(ca.get(), req, &resp).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
}

TEST(ServerRole, AdminTokenAndARoleLessTokenMayCallEveryRpc) {
  for (const std::string& file : {std::string(kAdmin) + " admin\n" + kRead + " read\n", std::string(kAdmin) + "\n"}) {
    RoleServer s(file);
    ASSERT_TRUE(s.server->stub);
    for (const Rpc& rpc : every_rpc()) {
      const grpc::Status st = rpc.call(*s.server->stub, kAdmin);
      EXPECT_NE(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << rpc.name << ": " << st.error_message();
      EXPECT_NE(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << rpc.name << ": " << st.error_message();
    }
    EXPECT_EQ(every_rpc()[1].call(*s.server->stub, "not-a-token-0123456789").error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
}

TEST(ServerRole, BadTokenFilesAreRefusedNamingTheLine) {
  const std::string dir = fresh_dir("roles_bad");
  const std::string path = dir + "/tokens";
  for (const auto& [text, expect] : std::vector<std::pair<std::string, std::string>>{
           {std::string(kAdmin) + "\n" + kRead + " reader\n", "line 2: role 'reader' is not read or admin"},
           {"short read\n", "line 1 holds a token shorter than 16 characters"},
           {std::string(kAdmin) + " admin extra\n", "line 1: expected `TOKEN [read|admin]`"},
           {std::string(kAdmin) + "\n" + kAdmin + " read\n", "line 2 repeats a token"},
           {"# nothing\n\n", "holds no token"}}) {
    std::ofstream(path) << text;
    auto a = Authenticator::from_file(path);
    ASSERT_FALSE(a.ok()) << text;
    EXPECT_NE(a.status().message().find(expect), std::string::npos) << a.status().message();
  }
}

}  // namespace
}  // namespace mt::server::testing

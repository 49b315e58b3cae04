// Bad input gets the right canonical code and a message naming the field, and the daemon keeps
// serving; auth, health and reflection.
#include <grpcpp/generic/generic_stub.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <limits>

#include "engine/job/job.h"
#include "server/spec_convert.h"
#include "tests/server/server_fixture.h"

namespace mt::server::testing {
namespace {

grpc::Status push_status(v1::Trainer::Stub& stub, const std::string& id, std::vector<uint32_t> tokens) {
  v1::PushDataResponse resp;
  auto c = ctx();
  auto w = stub.PushData(c.get(), &resp);
  v1::PushDataRequest chunk;
  chunk.set_job_id(id);
  for (uint32_t t : tokens) chunk.add_tokens(t);
  w->Write(chunk);
  w->WritesDone();
  return w->Finish();
}

grpc::Status plan_status(v1::Trainer::Stub& stub, const v1::JobSpec& spec) {
  v1::PlanJobRequest req;
  *req.mutable_spec() = spec;
  v1::PlanJobResponse resp;
  auto c = ctx();
  return stub.PlanJob(c.get(), req, &resp);
}

bool still_serving(v1::Trainer::Stub& stub) {
  v1::ListJobsRequest req;
  v1::ListJobsResponse resp;
  auto c = ctx();
  return stub.ListJobs(c.get(), req, &resp).ok();
}

constexpr float kInf = std::numeric_limits<float>::infinity();

// A small valid config.json under `dir` with one field replaced; returns its path.
std::string write_config(const std::string& dir, const std::string& name, const std::string& field, int64_t value) {
  Json j = *Json::parse(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256})");
  j.set(field, value);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + name + ".json";
  std::ofstream(path) << j.dump();
  return path;
}

struct Case {
  std::string name;
  std::function<grpc::Status(v1::Trainer::Stub&)> call;
  grpc::StatusCode code;
  std::string needle;  // the message names the field or value
};

TEST(ServerBadInput, EachGetsTheRightCodeAndTheDaemonKeepsServing) {
  const std::string dir = fresh_dir("bad");
  Server s(test_config(dir));
  ASSERT_TRUE(s.stub);
  const std::string synth_job = submit(*s.stub, tiny_spec(1));
  ASSERT_EQ(wait_terminal(*s.stub, synth_job).state(), v1::JOB_STATE_SUCCEEDED);
  const std::string push_job = submit(*s.stub, tiny_spec(1, "push"));  // runs, waiting for data

  auto spec_with = [](std::function<void(v1::JobSpec&)> f) {
    v1::JobSpec sp = tiny_spec(3);
    f(sp);
    return sp;
  };
  const std::string data = test_config(dir).data_root;
  const std::string layers_cfg = write_config(data, "layers", "num_hidden_layers", 67108864);
  const std::string hidden_cfg = write_config(data, "hidden", "hidden_size", 1 << 30);
  const std::string vocab_cfg = write_config(data, "vocab", "vocab_size", 1 << 30);
  const std::string huge_cfg = data + "/huge.json";
  std::ofstream(huge_cfg) << std::string(17 << 20, ' ');
  auto config_spec = [&](const std::string& path) {
    return spec_with([&](auto& sp) { sp.mutable_model()->clear_preset(); sp.mutable_model()->set_hf_config(path); });
  };
  const std::vector<Case> cases = {
      {"unknown preset", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { sp.mutable_model()->set_preset("gpt-17"); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "gpt-17"},
      {"no model", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { sp.clear_model(); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "model"},
      {"zero steps", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { sp.set_steps(0); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "steps"},
      {"bad backend", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { sp.set_backend("tpu"); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "backend"},
      {"bad source", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { sp.mutable_data()->set_source("web"); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "data.source"},
      {"three betas", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { for (int i = 0; i < 3; ++i) sp.mutable_optimizer()->add_betas(0.9f); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "betas"},
      {"bad decay", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { sp.mutable_schedule()->set_decay("step"); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "step"},
      {"path escape", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { sp.mutable_data()->set_source("text"); sp.mutable_data()->set_path("../../../../etc/passwd"); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "data.path"},
      // The held-out set's paths are checked as the training data's are.
      {"eval path escape", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { sp.mutable_eval()->mutable_data()->set_source("text"); sp.mutable_eval()->mutable_data()->set_path("../../../../etc/passwd"); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "eval.data.path"},
      {"eval tokenizer escape", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { auto* d = sp.mutable_eval()->mutable_data(); d->set_source("jsonl"); d->set_path("x.jsonl"); d->set_tokenizer("/etc/tokenizer.json"); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "eval.data.tokenizer"},
      {"eval missing file", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { sp.mutable_eval()->mutable_data()->set_source("tokens"); sp.mutable_eval()->mutable_data()->set_path("no-such.bin"); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "eval.data.path = "},
      {"eval of pushed data", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { sp.mutable_eval()->mutable_data()->set_source("push"); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "eval.data.source = push"},
      {"eval of 2^40 tokens", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { sp.mutable_eval()->mutable_data()->set_source("synthetic"); sp.mutable_eval()->set_max_tokens(int64_t(1) << 40); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "eval.max_tokens = 1099511627776 must be in 1..67108864"},
      {"keep_best without eval", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { sp.mutable_checkpoint()->set_keep_best(true); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "checkpoint.keep_best needs an eval section"},
      {"weights_only without from", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { sp.mutable_init()->set_weights_only(true); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "init.weights_only needs init.from"},
      {"absolute path escape", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { sp.mutable_model()->clear_preset(); sp.mutable_model()->set_hf_config("/etc/config.json"); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "model.hf_config"},
      {"unknown job", [&](auto& st) { v1::GetJobRequest r; r.set_job_id("job-999999"); v1::Job j; auto c = ctx(); return st.GetJob(c.get(), r, &j); },
       grpc::StatusCode::NOT_FOUND, "job-999999"},
      {"empty job id", [&](auto& st) { v1::CancelJobRequest r; v1::Job j; auto c = ctx(); return st.CancelJob(c.get(), r, &j); },
       grpc::StatusCode::INVALID_ARGUMENT, "job_id"},
      {"cancel a finished job", [&](auto& st) { v1::CancelJobRequest r; r.set_job_id(synth_job); v1::Job j; auto c = ctx(); return st.CancelJob(c.get(), r, &j); },
       grpc::StatusCode::FAILED_PRECONDITION, "succeeded"},
      {"checkpoint a finished job", [&](auto& st) { v1::CheckpointRequest r; r.set_job_id(synth_job); v1::CheckpointResponse x; auto c = ctx(); return st.Checkpoint(c.get(), r, &x); },
       grpc::StatusCode::FAILED_PRECONDITION, "running"},
      {"out-of-vocab token", [&](auto& st) { return push_status(st, push_job, {1, 2, 999, 3}); },
       grpc::StatusCode::INVALID_ARGUMENT, "tokens[2] = 999"},
      {"push to a synthetic job", [&](auto& st) { return push_status(st, synth_job, {1, 2}); },
       grpc::StatusCode::FAILED_PRECONDITION, "synthetic"},
      {"push without a job id", [&](auto& st) { return push_status(st, "", {1, 2}); },
       grpc::StatusCode::INVALID_ARGUMENT, "job_id"},
      {"oversized message", [&](auto& st) { return push_status(st, push_job, std::vector<uint32_t>(400000, 1)); },
       grpc::StatusCode::RESOURCE_EXHAUSTED, ""},
      // Issue 11, point 5: a float that is not finite is refused by name (protobuf floats can
      // carry inf and NaN; the engine's reader never lets one into training).
      {"infinite eps", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { sp.mutable_optimizer()->set_eps(kInf); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "optimizer.eps"},
      {"infinite weight_decay", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { sp.mutable_optimizer()->set_weight_decay(kInf); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "optimizer.weight_decay"},
      {"negative grad_clip", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { sp.mutable_optimizer()->set_grad_clip(-1); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "optimizer.grad_clip = -1.000000 must be a finite number >= 0"},
      {"micro_batch 0", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { sp.set_micro_batch(0); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "micro_batch = 0 must be >= 1"},
      {"negative global_batch", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { sp.set_global_batch(-1); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "global_batch = -1 must be >= 1"},
      {"NaN lr", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { sp.mutable_optimizer()->set_lr(std::nanf("")); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "optimizer.lr"},
      {"infinite beta", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { sp.mutable_optimizer()->add_betas(kInf); sp.mutable_optimizer()->add_betas(0.9f); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "optimizer.betas[0]"},
      {"infinite min_lr_ratio", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { sp.mutable_schedule()->set_min_lr_ratio(-kInf); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "schedule.min_lr_ratio"},
      // Point 6: model dimensions beyond ModelLimits, in submit and in PlanJob; a config file too
      // large to be one; a step shape beyond TrainLimits.
      {"2^26 layers (submit)", [&](auto& st) { return submit_status(st, config_spec(layers_cfg)); },
       grpc::StatusCode::INVALID_ARGUMENT, "'num_hidden_layers' = 67108864 exceeds the limit of 1024"},
      {"2^26 layers (plan)", [&](auto& st) { return plan_status(st, config_spec(layers_cfg)); },
       grpc::StatusCode::INVALID_ARGUMENT, "'num_hidden_layers' = 67108864 exceeds the limit of 1024"},
      {"2^30 hidden (plan)", [&](auto& st) { return plan_status(st, config_spec(hidden_cfg)); },
       grpc::StatusCode::INVALID_ARGUMENT, "'hidden_size' = 1073741824 exceeds the limit"},
      {"2^30 vocab (plan)", [&](auto& st) { return plan_status(st, config_spec(vocab_cfg)); },
       grpc::StatusCode::INVALID_ARGUMENT, "'vocab_size' = 1073741824 exceeds the limit"},
      {"a 17 MiB config.json", [&](auto& st) { return plan_status(st, config_spec(huge_cfg)); },
       grpc::StatusCode::INVALID_ARGUMENT, "the limit for this file is"},
      {"2^20 x 2^20 tokens a step", [&](auto& st) { return plan_status(st, spec_with([](auto& sp) { sp.set_seq_len(1 << 20); sp.set_micro_batch(1 << 20); sp.set_global_batch(1 << 20); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "tokens per step exceeds the limit"},
      {"2^30 weight slots", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { sp.set_slots(1 << 30); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "slots = 1073741824 must be in 2..64"},
      {"2^30 synthetic states", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { sp.mutable_data()->set_active_vocab(1 << 30); sp.mutable_data()->set_branching(1 << 30); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "data.active_vocab = 1073741824 exceeds the limit"},
      {"negative eod_id", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { sp.mutable_data()->set_eod_id(-5); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "data.eod_id = -5"},
      {"seq_len past the limit", [&](auto& st) { return submit_status(st, spec_with([](auto& sp) { sp.set_seq_len(1 << 30); })); },
       grpc::StatusCode::INVALID_ARGUMENT, "seq_len = 1073741824 exceeds the limit"},
  };
  for (const Case& c : cases) {
    grpc::Status st = c.call(*s.stub);
    EXPECT_EQ(st.error_code(), c.code) << c.name << ": " << st.error_message();
    EXPECT_NE(st.error_message().find(c.needle), std::string::npos) << c.name << ": " << st.error_message();
    EXPECT_FALSE(st.error_message().empty()) << c.name;
    EXPECT_TRUE(still_serving(*s.stub)) << "after " << c.name;
  }
  // Nothing was spooled by the refused pushes, and the daemon still serves.
  v1::Job j = wait_job(*s.stub, push_job, [](const v1::Job&) { return true; });
  EXPECT_EQ(j.data_spooled_tokens(), 0u);
  EXPECT_TRUE(push_status(*s.stub, push_job, {1, 2, 3}).ok());
}

TEST(ServerAuth, MissingOrWrongBearerTokenIsUnauthenticated) {
  const std::string dir = fresh_dir("auth");
  DaemonConfig cfg = test_config(dir);
  cfg.auth_token_file = dir + "/token";
  std::ofstream(cfg.auth_token_file) << "s3cret-token-0123456789\n";
  Server s(cfg);
  ASSERT_TRUE(s.stub);
  v1::ListJobsRequest req;
  v1::ListJobsResponse resp;
  auto c1 = ctx();
  EXPECT_EQ(s.stub->ListJobs(c1.get(), req, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  auto c2 = ctx();
  c2->AddMetadata("authorization", "Bearer wrong-token-0123456789xx");
  EXPECT_EQ(s.stub->ListJobs(c2.get(), req, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  auto c3 = ctx();
  c3->AddMetadata("authorization", "Bearer s3cret-token-0123456789");
  EXPECT_TRUE(s.stub->ListJobs(c3.get(), req, &resp).ok());
  // Streams too.
  v1::WatchJobRequest w;
  w.set_job_id("job-000001");
  auto c4 = ctx();
  auto reader = s.stub->WatchJob(c4.get(), w);
  v1::JobEvent ev;
  EXPECT_FALSE(reader->Read(&ev));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

// Every RPC without a token is UNAUTHENTICATED, before it touches the job manager (the unary
// ones go through one helper in service.cc, so a new RPC cannot skip the check).
TEST(ServerAuth, EveryRpcWithoutATokenIsUnauthenticated) {
  const std::string dir = fresh_dir("auth_all");
  DaemonConfig cfg = test_config(dir);
  cfg.auth_token_file = dir + "/token";
  std::ofstream(cfg.auth_token_file) << "s3cret-token-0123456789\n";
  Server s(cfg);
  ASSERT_TRUE(s.stub);
  const auto unauthenticated = grpc::StatusCode::UNAUTHENTICATED;
  auto call = [&](auto rpc, auto req, auto resp) {
    auto c = ctx();
    return (s.stub.get()->*rpc)(c.get(), req, &resp).error_code();
  };
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = tiny_spec(1);
  EXPECT_EQ(call(&v1::Trainer::Stub::SubmitJob, submit, v1::SubmitJobResponse()), unauthenticated);
  v1::GetJobRequest get;
  get.set_job_id("job-000001");
  EXPECT_EQ(call(&v1::Trainer::Stub::GetJob, get, v1::Job()), unauthenticated);
  EXPECT_EQ(call(&v1::Trainer::Stub::ListJobs, v1::ListJobsRequest(), v1::ListJobsResponse()), unauthenticated);
  v1::CancelJobRequest cancel;
  cancel.set_job_id("job-000001");
  EXPECT_EQ(call(&v1::Trainer::Stub::CancelJob, cancel, v1::Job()), unauthenticated);
  v1::CheckpointRequest checkpoint;
  checkpoint.set_job_id("job-000001");
  EXPECT_EQ(call(&v1::Trainer::Stub::Checkpoint, checkpoint, v1::CheckpointResponse()), unauthenticated);
  v1::PlanJobRequest plan;
  *plan.mutable_spec() = tiny_spec(1);
  EXPECT_EQ(call(&v1::Trainer::Stub::PlanJob, plan, v1::PlanJobResponse()), unauthenticated);
  v1::PauseJobRequest pause;
  pause.set_job_id("job-000001");
  EXPECT_EQ(call(&v1::Trainer::Stub::PauseJob, pause, v1::Job()), unauthenticated);
  v1::ResumeJobRequest resume;
  resume.set_job_id("job-000001");
  EXPECT_EQ(call(&v1::Trainer::Stub::ResumeJob, resume, v1::Job()), unauthenticated);
  v1::DeleteJobRequest del;
  del.set_job_id("job-000001");
  EXPECT_EQ(call(&v1::Trainer::Stub::DeleteJob, del, v1::DeleteJobResponse()), unauthenticated);
  auto cw = ctx();
  v1::WatchJobRequest watch;
  watch.set_job_id("job-000001");
  auto reader = s.stub->WatchJob(cw.get(), watch);
  v1::JobEvent ev;
  EXPECT_FALSE(reader->Read(&ev));
  EXPECT_EQ(reader->Finish().error_code(), unauthenticated);
  auto cp = ctx();
  v1::PushDataResponse pushed;
  auto writer = s.stub->PushData(cp.get(), &pushed);
  writer->WritesDone();
  EXPECT_EQ(writer->Finish().error_code(), unauthenticated);
  // Logs and artifacts (issue 17).
  v1::ListCheckpointsRequest list_ckpt;
  list_ckpt.set_job_id("job-000001");
  EXPECT_EQ(call(&v1::Trainer::Stub::ListCheckpoints, list_ckpt, v1::ListCheckpointsResponse()), unauthenticated);
  v1::ExportModelRequest export_model;
  export_model.set_job_id("job-000001");
  export_model.set_out_dir("x");
  EXPECT_EQ(call(&v1::Trainer::Stub::ExportModel, export_model, v1::ExportModelResponse()), unauthenticated);
  for (const char* id : {"job-000001", "daemon"}) {
    auto cl = ctx();
    v1::StreamLogsRequest logs;
    logs.set_job_id(id);
    auto log_reader = s.stub->StreamLogs(cl.get(), logs);
    v1::StreamLogsResponse lines;
    EXPECT_FALSE(log_reader->Read(&lines));
    EXPECT_EQ(log_reader->Finish().error_code(), unauthenticated) << id;
  }
}

// grpc.health.v1.Health/Check for `service` (HealthCheckRequest field 1); the status and the
// serialized response ({status: SERVING} = 08 01).
std::pair<grpc::Status, std::string> health_check(const std::shared_ptr<grpc::Channel>& channel,
                                                  const std::string& service) {
  grpc::GenericStub generic(channel);
  std::string wire;
  if (!service.empty()) wire = std::string("\x0a", 1) + char(service.size()) + service;
  grpc::Slice slice(wire.data(), wire.size());
  grpc::ByteBuffer req(&slice, 1), resp;
  auto c = ctx();
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status st;
  generic.UnaryCall(c.get(), "/grpc.health.v1.Health/Check", grpc::StubOptions(), &req, &resp, [&](grpc::Status s2) {
    std::lock_guard<std::mutex> l(mu);
    st = s2;
    done = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return done; });
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (st.ok() && resp.Dump(&slices).ok())
    for (auto& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  return {st, bytes};
}

TEST(ServerHealth, HealthAndReflectionAreServed) {
  Server s(test_config(fresh_dir("health")));
  ASSERT_TRUE(s.stub);
  grpc::GenericStub generic(s.channel);
  auto [st, bytes] = health_check(s.channel, "");
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
  std::vector<grpc::Slice> slices;

  // Reflection: list_services (field 7) on the bidi stream names our service.
  grpc::CompletionQueue cq;
  auto rc = ctx();
  auto call = generic.PrepareCall(rc.get(), "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag;
  bool ok;
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  grpc::Slice list("\x3a\x00", 2);
  grpc::ByteBuffer lreq(&list, 1);
  call->Write(lreq, reinterpret_cast<void*>(2));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  grpc::ByteBuffer lresp;
  call->Read(&lresp, reinterpret_cast<void*>(3));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  slices.clear();
  ASSERT_TRUE(lresp.Dump(&slices).ok());
  bytes.clear();
  for (auto& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  EXPECT_NE(bytes.find("megatrain.v1.Trainer"), std::string::npos);
  rc->TryCancel();
  grpc::Status fin;
  call->Finish(&fin, reinterpret_cast<void*>(4));
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

// Issue 11, point 10: PlanJob and the CLI's `plan` are one planner, and it answers what the
// streaming executor allocates: dense-120b compact in bf16 is 10 B/param of optimizer state plus
// the 2-byte bf16 shadow the uploads copy (issue 13), + staging; in fp32 no shadow exists.
TEST(ServerPlan, PlanJobIsTheEnginePlanner) {
  Server s(test_config(fresh_dir("plan")));
  ASSERT_TRUE(s.stub);
  for (const char* preset : {"dense-120b", "llama3-8b", "tiny"})
    for (const char* layout : {"compact", "exact"})
      for (const char* backend : {"cuda", "cpu"}) {
        v1::JobSpec spec = tiny_spec(10);
        spec.mutable_model()->set_preset(preset);
        spec.mutable_memory()->set_layout(layout);
        spec.set_backend(backend);
        spec.set_precision(backend == std::string("cuda") ? "auto" : "bf16");  // auto on CUDA is bf16
        v1::PlanJobRequest req;
        *req.mutable_spec() = spec;
        v1::PlanJobResponse resp;
        auto c = ctx();
        ASSERT_TRUE(s.stub->PlanJob(c.get(), req, &resp).ok()) << preset;
        auto engine_spec = spec_from_proto(spec, {fresh_dir("plan_roots")});
        ASSERT_TRUE(engine_spec.ok()) << engine_spec.status().to_string();
        auto cfg = resolve_model(*engine_spec);
        auto local = plan_for_job(*engine_spec, *cfg, test_config("x").host_memory, 0);
        ASSERT_TRUE(local.ok());
        EXPECT_EQ(resp.plan().host_bytes(), local->host_bytes) << preset << " " << layout << " " << backend;
        EXPECT_EQ(resp.plan().device_bytes(), local->device_bytes) << preset;
        ASSERT_EQ(resp.plan().host_bytes_by_kind().count("bf16_shadow"), 1u) << preset;
        EXPECT_NEAR(double(resp.plan().host_bytes_by_kind().at("bf16_shadow")), 2.0 * double(resp.plan().params()),
                    0.04 * double(resp.plan().params()));  // 2% of it: 4 KiB alignment per unit
        if (std::string(preset) == "dense-120b" && std::string(layout) == "compact") {
          EXPECT_GT(resp.plan().host_bytes_per_param(), 12.0) << backend;
          EXPECT_LT(resp.plan().host_bytes_per_param(), 12.5) << backend;
        }
      }
}

// Point 5 in the daemon: a job whose loss stops being finite FAILS with the step and quantity.
TEST(ServerNonFinite, ExplodingJobFailsNamingTheStep) {
  Server s(test_config(fresh_dir("nonfinite")));
  ASSERT_TRUE(s.stub);
  v1::JobSpec spec = tiny_spec(4);
  spec.mutable_optimizer()->set_lr(1e30f);
  spec.mutable_schedule()->set_warmup_steps(0);
  v1::Job j = wait_terminal(*s.stub, submit(*s.stub, spec));
  EXPECT_EQ(j.state(), v1::JOB_STATE_FAILED) << j.reason();
  EXPECT_NE(j.reason().find("step 2: the loss is not finite"), std::string::npos) << j.reason();
  EXPECT_TRUE(still_serving(*s.stub));
}

// Issue 11 (13): a check naming the service (what grpc_health_probe -service and load balancers
// send) is SERVING too, not NOT_FOUND; an unknown name still is NOT_FOUND.
TEST(ServerHealth, TrainerServiceNameIsServing) {
  Server s(test_config(fresh_dir("health_named")));
  ASSERT_TRUE(s.stub);
  auto [st, bytes] = health_check(s.channel, "megatrain.v1.Trainer");
  ASSERT_TRUE(st.ok()) << st.error_code() << " " << st.error_message();
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
  EXPECT_EQ(health_check(s.channel, "megatrain.v1.Nope").first.error_code(), grpc::StatusCode::NOT_FOUND);
}

// A client that opens streams and never reads them (watches, log followers) holds at most
// --max_streams of them: the next is refused RESOURCE_EXHAUSTED naming the flag, the job and the
// unary calls go on, and a stream that ends frees its slot. (Unbounded, 20,000 followers held
// 20,000 descriptors and the running job failed: it could not open its checkpoint directory.)
TEST(ServerStreams, MoreThanMaxStreamsAreRefusedAndAnEndedOneFreesItsSlot) {
  DaemonConfig cfg = test_config(fresh_dir("max_streams"));
  cfg.max_streams = 3;
  Server s(cfg);
  ASSERT_TRUE(s.stub);
  const std::string id = submit(*s.stub, tiny_spec(1000000));
  v1::WatchJobRequest wreq;
  wreq.set_job_id(id);
  v1::StreamLogsRequest lreq;
  lreq.set_job_id(id);
  lreq.set_follow(true);
  std::vector<std::unique_ptr<grpc::ClientContext>> held;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::JobEvent>>> watches;
  v1::JobEvent ev;
  for (int i = 0; i < 2; ++i) {  // two watches, each open once it has its first event
    held.push_back(ctx(60));
    watches.push_back(s.stub->WatchJob(held.back().get(), wreq));
    ASSERT_TRUE(watches.back()->Read(&ev)) << i;
  }
  held.push_back(ctx(60));
  auto follower = s.stub->StreamLogs(held.back().get(), lreq);
  follower->WaitForInitialMetadata();  // the third: a follower, listening

  const std::string scraped = http_get(s.daemon->metrics_port(), "/metrics");
  EXPECT_NE(scraped.find("megatrain_streams_open{kind=\"read\"} 3"), std::string::npos) << scraped;
  EXPECT_NE(scraped.find("megatrain_streams_open{kind=\"push\"} 0"), std::string::npos) << scraped;

  auto c1 = ctx(10);
  auto refused_watch = s.stub->WatchJob(c1.get(), wreq);
  EXPECT_FALSE(refused_watch->Read(&ev));
  const grpc::Status w = refused_watch->Finish();
  EXPECT_EQ(w.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << w.error_message();
  EXPECT_NE(w.error_message().find("--max_streams"), std::string::npos) << w.error_message();
  auto c2 = ctx(10);
  auto refused_logs = s.stub->StreamLogs(c2.get(), lreq);
  v1::StreamLogsResponse line;
  EXPECT_FALSE(refused_logs->Read(&line));
  EXPECT_EQ(refused_logs->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  // Pushes are bounded apart: readers holding every reader's slot do not stop them.
  EXPECT_NE(push_status(*s.stub, id, {1, 2, 3}).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(still_serving(*s.stub));

  held[0]->TryCancel();  // the first watch ends: its slot comes back once the daemon is done with it
  while (watches[0]->Read(&ev)) {
  }
  (void)watches[0]->Finish();
  bool reopened = false;
  for (int attempt = 0; attempt < 200 && !reopened; ++attempt) {
    auto c = ctx(10);
    auto again = s.stub->WatchJob(c.get(), wreq);
    reopened = again->Read(&ev);
    c->TryCancel();
    (void)again->Finish();
    if (!reopened) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(reopened) << "the ended watch's slot never came back";
  v1::CancelJobRequest cancel;
  cancel.set_job_id(id);
  v1::Job j;
  auto c3 = ctx();
  EXPECT_TRUE(s.stub->CancelJob(c3.get(), cancel, &j).ok());
  EXPECT_EQ(wait_terminal(*s.stub, id).state(), v1::JOB_STATE_CANCELLED);
  for (auto& c : held) c->TryCancel();
  for (size_t i = 1; i < watches.size(); ++i) {
    while (watches[i]->Read(&ev)) {
    }
    (void)watches[i]->Finish();
  }
  while (follower->Read(&line)) {
  }
  (void)follower->Finish();
}

// A name longer than 256 bytes, a NUL in a path and a ListJobs state that names no state are
// INVALID_ARGUMENT; a page of jobs whose specs are large ends before the reply outgrows
// --max_message_bytes, and its token leads on to the rest (the first version filled pages by
// count: 50 jobs of 45,000-byte names broke ListJobs and `megatrain list` for everyone).
TEST(ServerBadInput, LongNamesNulPathsAndUnknownStatesAreRefusedAndPagesFitAReply) {
  DaemonConfig cfg = test_config(fresh_dir("list_by_size"));
  cfg.max_message_bytes = 64 << 10;  // the least allowed
  Server s(cfg);
  ASSERT_TRUE(s.stub);
  v1::JobSpec long_name = tiny_spec(1);
  long_name.set_name(std::string(257, 'n'));
  grpc::Status st = submit_status(*s.stub, long_name);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("at most 256"), std::string::npos) << st.error_message();
  v1::JobSpec nul = tiny_spec(1, "text");
  nul.mutable_data()->set_path(std::string("ok.txt\0junk", 11));
  st = submit_status(*s.stub, nul);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("NUL"), std::string::npos) << st.error_message();
  v1::ListJobsRequest bad_state;
  bad_state.set_state(v1::JobState(99));
  v1::ListJobsResponse resp;
  auto c = ctx();
  EXPECT_EQ(s.stub->ListJobs(c.get(), bad_state, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // Paths of 3,000 bytes (a deep directory inside the root): each Job carries one in its spec.
  std::string dir = "d";
  while (dir.size() < 3000) dir += "/" + std::string(200, 'x');
  std::filesystem::create_directories(cfg.data_root + "/" + dir);
  std::ofstream(cfg.data_root + "/" + dir + "/t.txt") << std::string(4096, 'a');
  std::vector<std::string> ids;
  for (int i = 0; i < 24; ++i) {  // ~3.7 KB a Job: two pages at least
    v1::JobSpec spec = tiny_spec(1, "text");
    spec.mutable_data()->set_path(dir + "/t.txt");
    spec.set_name(std::string(256, char('A' + i)));
    ids.push_back(submit(*s.stub, spec));
    ASSERT_FALSE(ids.back().empty()) << i;
  }
  std::vector<std::string> listed;
  v1::ListJobsRequest req;
  int pages = 0;
  do {
    auto cl = ctx();
    v1::ListJobsResponse page;
    grpc::Status ls = s.stub->ListJobs(cl.get(), req, &page);
    ASSERT_TRUE(ls.ok()) << ls.error_message();
    EXPECT_LE(page.ByteSizeLong(), size_t(cfg.max_message_bytes));
    for (const auto& j : page.jobs()) listed.push_back(j.id());
    req.set_page_token(page.next_page_token());
    ++pages;
  } while (!req.page_token().empty() && pages < 100);
  EXPECT_EQ(listed, ids);
  EXPECT_GT(pages, 1);
}

// A name reaches other users' `megatrain list`: a newline would forge a row, an escape recolour it,
// a bidi override reorder it.
TEST(ServerBadInput, NamesWithControlCharactersAreRefused) {
  Server s(test_config(fresh_dir("control_names")));
  ASSERT_TRUE(s.stub);
  for (const auto& [name, what] : std::vector<std::pair<std::string, std::string>>{
           {"x\n2026-12-07 FAKE row", "U+000A at byte 1"},
           {"red\x1b[31m", "U+001B at byte 3"},
           {std::string("a\0b", 3), "U+0000 at byte 1"},
           {"csi\xc2\x9b""31m", "U+009B at byte 3"},
           {"del\x7f", "U+007F at byte 3"}}) {
    v1::JobSpec bad = tiny_spec(1);
    bad.set_name(name);
    grpc::Status st = submit_status(*s.stub, bad);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << what << ": " << st.error_message();
    EXPECT_NE(st.error_message().find("name has the control character " + what), std::string::npos) << st.error_message();
  }
  // Invisible characters that reorder or hide what a list shows: "\u202etxt.exe" reads "exe.txt".
  for (const auto& [name, what] : std::vector<std::pair<std::string, std::string>>{
           {"\xe2\x80\xaetxt.exe", "U+202E at byte 0"},
           {"zero\xe2\x80\x8bwidth", "U+200B at byte 4"},
           {"iso\xe2\x81\xa6late", "U+2066 at byte 3"},
           {"bom\xef\xbb\xbf", "U+FEFF at byte 3"}}) {
    v1::JobSpec bad = tiny_spec(1);
    bad.set_name(name);
    grpc::Status st = submit_status(*s.stub, bad);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << what << ": " << st.error_message();
    EXPECT_NE(st.error_message().find("name has the invisible format character " + what), std::string::npos)
        << st.error_message();
  }
  v1::JobSpec printable = tiny_spec(1);
  printable.set_name("résumé\xc2\xa0v2 \xe2\x80\x94 ok");  // é, a no-break space, an em dash
  grpc::Status st = submit_status(*s.stub, printable);
  EXPECT_TRUE(st.ok()) << st.error_message();
}

}  // namespace
}  // namespace mt::server::testing

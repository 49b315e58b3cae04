// StreamLogs, ListCheckpoints and ExportModel against an in-process daemon: a follower sees every
// step line once and in order across the log's rotation and its stream ends with the job; tail
// and since; the daemon's own log; checkpoints listed with their real sizes; an export read back
// with the engine's loaders equals the checkpoint (fp32 bit for bit, bf16 as its rounding); and
// every way out of the data root refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <future>
#include <thread>

#include "engine/io/model_files.h"
#include "kernels/bf16.h"
#include "tests/engine/symlink_swap.h"
#include "tests/server/server_fixture.h"

namespace mt::server::testing {
namespace {

namespace fs = std::filesystem;

struct Stream {
  std::vector<v1::LogLine> lines;
  grpc::Status status;
};

Stream stream_logs(v1::Trainer::Stub& stub, const std::string& id, bool follow, int64_t tail = 0, int64_t since = 0,
                   double seconds = 120, std::promise<void>* listening = nullptr) {
  v1::StreamLogsRequest req;
  req.set_job_id(id);
  req.set_follow(follow);
  req.set_tail_lines(tail);
  req.set_since_unix_ms(since);
  auto c = ctx(seconds);
  auto reader = stub.StreamLogs(c.get(), req);
  if (listening) {  // a follower's headers come once the daemon listens for its lines
    reader->WaitForInitialMetadata();
    listening->set_value();
  }
  Stream out;
  v1::StreamLogsResponse msg;
  while (reader->Read(&msg))
    for (const auto& l : msg.lines()) out.lines.push_back(l);
  out.status = reader->Finish();
  return out;
}

// The K of every "step K/N ..." line, in order.
std::vector<long> steps_of(const std::vector<v1::LogLine>& lines) {
  std::vector<long> out;
  for (const auto& l : lines) {
    long k = 0, n = 0;
    if (std::sscanf(l.text().c_str(), "step %ld/%ld ", &k, &n) == 2) out.push_back(k);
  }
  return out;
}

TEST(ServerLogs, AFollowerSeesEveryStepOnceInOrderAndEndsWithTheJob) {
  const std::string dir = fresh_dir("logs_follow");
  DaemonConfig cfg = test_config(dir);
  cfg.log_file_bytes = 2048;  // the job's ~70-byte step lines rotate the log during the run
  Server s(cfg);
  ASSERT_TRUE(s.stub);
  const long steps = 40;
  const std::string id = submit(*s.stub, tiny_spec(steps));
  const Stream followed = stream_logs(*s.stub, id, true);
  ASSERT_TRUE(followed.status.ok()) << followed.status.error_message();
  // The stream ended because the job did: it is over, and its last line says so.
  EXPECT_TRUE(terminal(wait_job(*s.stub, id, [](const v1::Job&) { return true; }).state()));
  ASSERT_FALSE(followed.lines.empty());
  EXPECT_EQ(followed.lines.back().text(), "job succeeded: finished");
  std::vector<long> want(steps);
  for (long k = 0; k < steps; ++k) want[size_t(k)] = k + 1;
  EXPECT_EQ(steps_of(followed.lines), want);
  for (size_t i = 1; i < followed.lines.size(); ++i) EXPECT_GE(followed.lines[i].unix_ms(), followed.lines[i - 1].unix_ms());
  EXPECT_TRUE(fs::exists(dir + "/jobs/" + id + "/log.txt.1")) << "the log never rotated; the test did not test that";

  // Without follow, the lines kept now (rotation dropped the oldest file, never a line of the
  // newest ones): the same last lines as the follower saw.
  const Stream kept = stream_logs(*s.stub, id, false);
  ASSERT_TRUE(kept.status.ok());
  ASSERT_LE(kept.lines.size(), followed.lines.size());
  for (size_t i = 0; i < kept.lines.size(); ++i)
    EXPECT_EQ(kept.lines[i].text(), followed.lines[followed.lines.size() - kept.lines.size() + i].text());

  const Stream tail = stream_logs(*s.stub, id, false, 5);
  ASSERT_EQ(tail.lines.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(tail.lines[i].text(), kept.lines[kept.lines.size() - 5 + i].text());
  // A tail far beyond the log is the whole log, not an allocation of that size.
  EXPECT_EQ(stream_logs(*s.stub, id, false, int64_t(1) << 62).lines.size(), kept.lines.size());

  const int64_t since = kept.lines[kept.lines.size() / 2].unix_ms();
  size_t newer = 0;
  for (const auto& l : kept.lines) newer += l.unix_ms() >= since;
  const Stream recent = stream_logs(*s.stub, id, false, 0, since);
  EXPECT_EQ(recent.lines.size(), newer);
  for (const auto& l : recent.lines) EXPECT_GE(l.unix_ms(), since);
  // Following a job that has ended is the same as reading it: the stream ends.
  EXPECT_EQ(stream_logs(*s.stub, id, true).lines.size(), kept.lines.size());
}

// Issue 24.3: deleting a queued or a paused job ends its followers (as CANCELLED ends its
// watchers), with OK, well before their deadline.
TEST(ServerLogs, AFollowerOfAQueuedOrPausedJobEndsWhenTheJobIsDeleted) {
  const std::string dir = fresh_dir("logs_delete");
  Server s(test_config(dir));
  ASSERT_TRUE(s.stub);
  const std::string busy = submit(*s.stub, tiny_spec(100000));
  wait_job(*s.stub, busy, [](const v1::Job& j) { return j.state() == v1::JOB_STATE_RUNNING; });
  for (const bool pause : {false, true}) {
    const std::string id = submit(*s.stub, tiny_spec(4));
    if (pause) {
      v1::PauseJobRequest req;
      req.set_job_id(id);
      v1::Job reply;
      auto c = ctx();
      ASSERT_TRUE(s.stub->PauseJob(c.get(), req, &reply).ok());
    }
    Stream followed;
    std::promise<void> listening;
    std::thread follower([&] { followed = stream_logs(*s.stub, id, true, 0, 0, 20, &listening); });
    // The daemon sends a follower its headers once it listens: only then is the delete raced.
    ASSERT_EQ(listening.get_future().wait_for(std::chrono::seconds(20)), std::future_status::ready);
    v1::DeleteJobRequest del;
    del.set_job_id(id);
    v1::DeleteJobResponse resp;
    auto c = ctx();
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(s.stub->DeleteJob(c.get(), del, &resp).ok());
    follower.join();
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_TRUE(followed.status.ok()) << (pause ? "paused: " : "queued: ") << followed.status.error_message();
    EXPECT_LT(waited, 10.0) << "the follower outlived the deleted job";
  }
}

TEST(ServerLogs, UnknownJobBadArgumentsAndTheDaemonsOwnLog) {
  const std::string dir = fresh_dir("logs_daemon");
  Server s(test_config(dir));
  ASSERT_TRUE(s.stub);
  const std::string id = submit(*s.stub, tiny_spec(2));
  wait_terminal(*s.stub, id);
  EXPECT_EQ(stream_logs(*s.stub, "job-999999", false).status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(stream_logs(*s.stub, id, false, -1).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(stream_logs(*s.stub, id, false, 0, -5).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  for (const std::string& name : {std::string("daemon"), std::string()}) {
    const Stream d = stream_logs(*s.stub, name, false);
    ASSERT_TRUE(d.status.ok()) << d.status.error_message();
    bool seen = false;
    for (const auto& l : d.lines) seen |= l.text().rfind("job " + id + ": model ", 0) == 0;
    EXPECT_TRUE(seen) << "the daemon's log has no line of the job's model";
  }
  EXPECT_TRUE(fs::exists(dir + "/daemon.log"));
}

uint64_t files_bytes(const std::string& dir) {
  uint64_t n = 0;
  for (const auto& f : fs::directory_iterator(dir)) n += f.is_regular_file() ? f.file_size() : 0;
  return n;
}

grpc::Status export_model(v1::Trainer::Stub& stub, const std::string& id, const std::string& out, long step,
                          const std::string& dtype, v1::ExportModelResponse* resp, bool overwrite = false) {
  v1::ExportModelRequest req;
  req.set_job_id(id);
  req.set_out_dir(out);
  req.set_step(step);
  req.set_dtype(dtype);
  req.set_overwrite(overwrite);
  auto c = ctx(120);
  return stub.ExportModel(c.get(), req, resp);
}

TEST(ServerArtifacts, CheckpointsListedAndAnExportReadsBackAsTheCheckpoint) {
  const std::string dir = fresh_dir("artifacts");
  Server s(test_config(dir));
  ASSERT_TRUE(s.stub);
  v1::JobSpec spec = tiny_spec(12);
  spec.mutable_checkpoint()->set_every(4);
  spec.mutable_checkpoint()->set_keep(5);  // all three
  const std::string id = submit(*s.stub, spec);
  const v1::Job job = wait_terminal(*s.stub, id);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED) << job.reason();

  v1::ListCheckpointsRequest lreq;
  lreq.set_job_id(id);
  v1::ListCheckpointsResponse list;
  auto c = ctx();
  ASSERT_TRUE(s.stub->ListCheckpoints(c.get(), lreq, &list).ok());
  ASSERT_EQ(list.checkpoints_size(), 3);
  for (int i = 0; i < 3; ++i) {
    const auto& ck = list.checkpoints(i);
    EXPECT_EQ(ck.step(), 4 * (i + 1));
    EXPECT_EQ(ck.size_bytes(), files_bytes(ck.path())) << ck.path();
    EXPECT_GT(ck.size_bytes(), 0u);
    EXPECT_TRUE(std::isfinite(ck.loss()) && ck.loss() > 0) << ck.loss();
    EXPECT_GE(ck.unix_ms(), job.created_unix_ms());
    EXPECT_LE(ck.unix_ms(), job.finished_unix_ms());
    EXPECT_EQ(ck.latest(), i == 2);
  }
  EXPECT_DOUBLE_EQ(list.checkpoints(2).loss(), job.loss());
  v1::ListCheckpointsRequest unknown;
  unknown.set_job_id("job-999999");
  auto c2 = ctx();
  EXPECT_EQ(s.stub->ListCheckpoints(c2.get(), unknown, &list).error_code(), grpc::StatusCode::NOT_FOUND);

  // fp32 of step 8: the checkpoint's master weights, bit for bit.
  v1::ExportModelResponse resp;
  grpc::Status st = export_model(*s.stub, id, "exports/fp32", 8, "fp32", &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(resp.out_dir(), fs::weakly_canonical(dir + "/data/exports/fp32").string());
  EXPECT_EQ(resp.step(), 8);
  EXPECT_EQ(resp.size_bytes(), files_bytes(resp.out_dir()));
  auto ckpt = load_model_dir(list.checkpoints(1).path());
  auto fp32 = load_model_dir(resp.out_dir());
  ASSERT_TRUE(ckpt.ok() && fp32.ok());
  ASSERT_EQ(ckpt->store->num_units(), fp32->store->num_units());
  for (size_t u = 0; u < ckpt->store->num_units(); ++u) {
    const HostUnit &a = ckpt->store->unit(u), &b = fp32->store->unit(u);
    ASSERT_EQ(a.numel, b.numel);
    EXPECT_EQ(std::memcmp(a.master, b.master, a.numel * sizeof(float)), 0) << "unit " << u;
  }
  // bf16 of the latest (step 12; dtype and step left to their defaults): its rounding.
  st = export_model(*s.stub, id, dir + "/data/exports/bf16", 0, "", &resp);  // absolute, inside the root
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(resp.step(), 12);
  EXPECT_EQ(resp.dtype(), "bf16");
  auto last = load_model_dir(list.checkpoints(2).path());
  auto bf = load_model_dir(resp.out_dir());
  ASSERT_TRUE(last.ok() && bf.ok());
  size_t mismatches = 0;
  for (size_t u = 0; u < last->store->num_units(); ++u)
    for (size_t i = 0; i < last->store->unit(u).numel; ++i)
      mismatches += bf16_to_float(float_to_bf16(last->store->unit(u).master[i])) != bf->store->unit(u).master[i];
  EXPECT_EQ(mismatches, 0u);

  // Refusals; nothing is written outside the data root.
  const std::string outside = dir + "/outside";
  fs::create_directories(outside);
  fs::create_directories(dir + "/data/sub");
  fs::create_symlink(outside, dir + "/data/link");
  fs::create_symlink(outside, dir + "/data/sub/leaf");
  struct Refusal {
    std::string out, dtype;
    long step;
    grpc::StatusCode code;
    std::string needle;
  };
  const std::vector<Refusal> refusals = {
      {"../outside/x", "", 0, grpc::StatusCode::INVALID_ARGUMENT, "'..'"},
      {"exports/../../outside", "", 0, grpc::StatusCode::INVALID_ARGUMENT, "'..'"},
      {outside + "/x", "", 0, grpc::StatusCode::INVALID_ARGUMENT, "outside the data root"},
      {"link/x", "", 0, grpc::StatusCode::INVALID_ARGUMENT, "symlink"},
      {"sub/leaf", "", 0, grpc::StatusCode::INVALID_ARGUMENT, "symlink"},
      {"", "", 0, grpc::StatusCode::INVALID_ARGUMENT, "out_dir"},
      {".", "", 0, grpc::StatusCode::INVALID_ARGUMENT, "data root itself"},
      {"exports/fp32", "", 0, grpc::StatusCode::FAILED_PRECONDITION, "already holds files"},
      {"exports/new", "fp16", 0, grpc::StatusCode::INVALID_ARGUMENT, "dtype"},
      {"exports/new", "", 5, grpc::StatusCode::NOT_FOUND, "steps 4, 8, 12"},
      {"exports/new", "", -3, grpc::StatusCode::INVALID_ARGUMENT, "step"},
      {"exports/" + std::string(300, 'n'), "", 0, grpc::StatusCode::INVALID_ARGUMENT, "too long"},  // not DATA_LOSS
      {"exports/a\nb", "", 0, grpc::StatusCode::INVALID_ARGUMENT, "out_dir has the control character U+000A"},
      {"exports/\xe2\x80\xaetxt", "", 0, grpc::StatusCode::INVALID_ARGUMENT, "invisible format character U+202E"},
  };
  for (const auto& r : refusals) {
    st = export_model(*s.stub, id, r.out, r.step, r.dtype, &resp);
    EXPECT_EQ(st.error_code(), r.code) << r.out << ": " << st.error_message();
    EXPECT_NE(st.error_message().find(r.needle), std::string::npos) << r.out << ": " << st.error_message();
  }
  EXPECT_TRUE(fs::is_empty(outside));
  EXPECT_FALSE(fs::exists(dir + "/data/exports/new"));
  EXPECT_EQ(export_model(*s.stub, "job-999999", "exports/n", 0, "", &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  // --overwrite replaces an earlier export.
  st = export_model(*s.stub, id, "exports/fp32", 12, "fp32", &resp, true);
  EXPECT_TRUE(st.ok()) << st.error_message();
}

// Issue 24.5: a directory of out_dir swapped between a real directory and a symlink to the
// outside (atomically, in a loop) while exports run: an export either refuses the symlink or
// writes into the real directory; nothing ever lands outside the data root. Bounded in count
// and time.
TEST(ServerArtifacts, AnExportNeverWritesOutsideTheDataRootWhileASymlinkIsSwappedIn) {
  const std::string dir = fresh_dir("artifacts_swap");
  Server s(test_config(dir));
  ASSERT_TRUE(s.stub);
  const std::string id = submit(*s.stub, tiny_spec(2));
  ASSERT_EQ(wait_terminal(*s.stub, id).state(), v1::JOB_STATE_SUCCEEDED);
  const std::string outside = dir + "/outside";
  testing_util::SymlinkSwap swap(dir + "/data", "swap", outside);
  int ok = 0, refused = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int i = 0; i < 60 && std::chrono::steady_clock::now() < end; ++i) {
    v1::ExportModelResponse resp;
    const grpc::Status st = export_model(*s.stub, id, "swap/t" + std::to_string(i), 0, "bf16", &resp);
    if (st.ok()) ++ok;
    else {
      ++refused;
      EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
      EXPECT_NE(st.error_message().find("symlink"), std::string::npos) << st.error_message();
    }
  }
  EXPECT_GT(swap.stop(), 10) << "the swap did not race";
  EXPECT_TRUE(fs::is_empty(outside)) << "an export wrote outside the data root";
  EXPECT_GT(ok + refused, 0);
  RecordProperty("exports_written", ok);
  RecordProperty("exports_refused", refused);
}

}  // namespace
}  // namespace mt::server::testing

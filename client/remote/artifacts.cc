// checkpoints ID and export --remote ID OUT_DIR: a job's checkpoints on the daemon, and one of
// them written as a Hugging Face model directory under the daemon's data root.
#include <cstdio>

#include "client/remote/commands.h"
#include "client/remote/format.h"
#include "engine/base/utc_time.h"

namespace mt::cli {

int remote_checkpoints(Connection& c, const Args& a) {
  if (a.positional().size() != 1) return usage_error("checkpoints");
  v1::ListCheckpointsRequest req;
  req.set_job_id(a.positional()[0]);
  v1::ListCheckpointsResponse resp;
  auto ctx = c.context();
  if (grpc::Status s = c.stub().ListCheckpoints(ctx.get(), req, &resp); !s.ok())
    return c.fail(s, "checkpoints " + req.job_id());
  if (!a.json())
    std::printf("%-10s %-12s %-12s %-12s %-24s %s\n", "STEP", "LOSS", "HELD-OUT", "SIZE", "WRITTEN", "PATH");
  for (const auto& ck : resp.checkpoints()) {
    if (a.json()) {
      Json j = Json::object({{"step", ck.step()}, {"loss", ck.loss()}, {"size_bytes", int64_t(ck.size_bytes())},
                             {"unix_ms", ck.unix_ms()}, {"path", ck.path()}, {"latest", ck.latest()}, {"best", ck.best()}});
      if (ck.has_eval_loss()) j.set("eval_loss", ck.eval_loss());
      print_json(j);
      continue;
    }
    char held_out[32] = "-";
    if (ck.has_eval_loss()) std::snprintf(held_out, sizeof held_out, "%.6f", ck.eval_loss());
    const std::string tags = std::string(ck.latest() ? "  (latest)" : "") + (ck.best() ? "  (best held-out)" : "");
    std::printf("%-10lld %-12.6f %-12s %-12s %-24s %s%s\n", (long long)ck.step(), ck.loss(), held_out,
                human_bytes(ck.size_bytes()).c_str(), utc_time_text(ck.unix_ms()).c_str(), ck.path().c_str(), tags.c_str());
  }
  if (!a.json() && resp.checkpoints_size() == 0) std::printf("no checkpoints\n");
  return kOk;
}

int remote_export(Connection& c, const Args& a) {
  if (a.positional().size() != 1 || a.get("remote").empty()) return usage_error("export");
  v1::ExportModelRequest req;
  req.set_job_id(a.get("remote"));
  req.set_out_dir(a.positional()[0]);
  req.set_dtype(a.get("dtype", "bf16"));
  req.set_overwrite(a.has("overwrite"));
  if (a.has("step")) {
    auto step = a.integer("step", 0, 1, INT64_MAX);
    if (!step.ok()) return fail(kUsage, step.status().message());
    req.set_step(*step);
  }
  v1::ExportModelResponse resp;
  auto ctx = c.context(3600);  // reads and writes the whole model
  if (grpc::Status s = c.stub().ExportModel(ctx.get(), req, &resp); !s.ok())
    return c.fail(s, "export --remote " + req.job_id());
  if (a.json())
    print_json(Json::object({{"event", "exported"}, {"exported", resp.out_dir()}, {"from", resp.checkpoint()}, {"step", resp.step()},
                             {"dtype", resp.dtype()}, {"size_bytes", int64_t(resp.size_bytes())}}));
  else
    std::printf("exported %s step %lld -> %s (%s, %s)\n", req.job_id().c_str(), (long long)resp.step(),
                resp.out_dir().c_str(), resp.dtype().c_str(), human_bytes(resp.size_bytes()).c_str());
  return kOk;
}

}  // namespace mt::cli

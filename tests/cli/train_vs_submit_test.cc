// The same spec trained by `megatrain train` (the engine in the foreground) and by `megatrain
// submit --watch` (the daemon) gives the same final loss on the CPU backend: the JSON summaries
// agree exactly on steps and final_loss.
#include "tests/cli/cli_fixture.h"

namespace mt::cli::testing {
namespace {

TEST(TrainVsSubmit, SameFinalLossOnCpu) {
  const std::string dir = fresh_dir("train_vs_submit");
  const std::string spec = write_file(dir + "/spec.yaml", tiny_spec_yaml(5));
  RunResult local = megatrain({"train", spec, "--json", "--out", dir + "/local"});
  ASSERT_EQ(local.rc, 0) << describe(local);
  DaemonProcess d("train_vs_submit_daemon");
  ASSERT_TRUE(d.ok());
  RunResult remote = d.cli({"submit", spec, "--watch", "--json"});
  ASSERT_EQ(remote.rc, 0) << describe(remote) << d.log();

  auto l = local.json_lines(), r = remote.json_lines();
  ASSERT_FALSE(l.empty());
  ASSERT_FALSE(r.empty());
  const Json &ls = l.back(), &rs = r.back();
  ASSERT_EQ(ls.find("event")->as_string(), "summary");
  ASSERT_EQ(rs.find("event")->as_string(), "summary");
  EXPECT_EQ(ls.find("steps")->dump(), "5");
  EXPECT_EQ(rs.find("steps")->dump(), "5");
  EXPECT_EQ(rs.find("final_loss")->dump(), ls.find("final_loss")->dump()) << "local " << ls.dump() << "\nremote "
                                                                           << rs.dump();
  // The per-step losses agree too.
  std::vector<std::string> local_losses, remote_losses;
  for (const Json& j : l)
    if (j.find("event")->as_string() == "step") local_losses.push_back(j.find("loss")->dump());
  for (const Json& j : r)
    if (j.find("event")->as_string() == "step") remote_losses.push_back(j.find("loss")->dump());
  EXPECT_EQ(local_losses, remote_losses);
  EXPECT_TRUE(fs::exists(rs.find("checkpoint")->as_string()));
  EXPECT_TRUE(fs::exists(ls.find("checkpoint")->as_string()));
  if (!HasFailure()) fs::remove_all(dir);
}

}  // namespace
}  // namespace mt::cli::testing

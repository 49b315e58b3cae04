// `megatrain train SPEC --devices N` with executor: resident against executor: streaming at the
// same N, on the CPU: the same loss every step and at the end, to the last bit (the executors sum
// the devices' gradients and the loss in the same order); a count the batch cannot split is
// refused before training, naming it.
#include "tests/cli/cli_fixture.h"

namespace mt::cli::testing {
namespace {

// 4 micro-batches a step: 2 a device at --devices 2.
std::string spec_yaml() {
  std::string s = tiny_spec_yaml(4);
  const std::string from = "global_batch: 4\n";
  s.replace(s.find(from), from.size(), "global_batch: 8\n");
  return s;
}

std::vector<std::string> losses(const RunResult& r, std::string& final_loss) {
  std::vector<std::string> l;
  for (const Json& j : r.json_lines()) {
    const std::string event = j.find("event")->as_string();
    if (event == "step") l.push_back(j.find("loss")->dump());
    if (event == "summary") final_loss = j.find("final_loss")->dump();
  }
  return l;
}

TEST(DataParallelCli, ResidentDevicesTwoEqualsStreamingDevicesTwo) {
  const std::string dir = fresh_dir("train_devices");
  const std::string spec = write_file(dir + "/spec.yaml", spec_yaml());
  auto train = [&](const std::string& executor, const std::string& devices, const std::string& out) {
    return megatrain({"train", spec, "--json", "--executor", executor, "--devices", devices, "--out", dir + out});
  };
  RunResult res = train("resident", "2", "/r");
  RunResult str = train("streaming", "2", "/s");
  ASSERT_EQ(res.rc, 0) << describe(res);
  ASSERT_EQ(str.rc, 0) << describe(str);
  EXPECT_NE(res.err.find("2 device(s) each, 4 sequences per device per step"), std::string::npos) << res.err;
  std::string res_final, str_final;
  const auto res_losses = losses(res, res_final), str_losses = losses(str, str_final);
  EXPECT_EQ(res_losses.size(), 4u);
  EXPECT_EQ(res_losses, str_losses);
  EXPECT_FALSE(res_final.empty());
  EXPECT_EQ(res_final, str_final);

  RunResult bad = train("resident", "3", "/b");
  EXPECT_NE(bad.rc, 0) << describe(bad);
  EXPECT_NE(bad.err.find("devices = 3"), std::string::npos) << describe(bad);
  if (!HasFailure()) fs::remove_all(dir);
}

}  // namespace
}  // namespace mt::cli::testing

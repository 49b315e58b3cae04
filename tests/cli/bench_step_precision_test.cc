// megatrain-bench step --precision and --layers, as a separate process (what scripts/gpu_check.sh
// runs on a GPU with --backend cuda): the JSON says what ran, bf16 uploads half the weight bytes
// of fp32 at the same shape (issue 13: h2d_bytes ≤ 0.55 × fp32's), and bad values are refused.
#include "tests/cli/cli_fixture.h"
#include "tests/test_paths.h"

namespace mt::cli::testing {
namespace {

RunResult bench_step(const std::string& precision, const std::string& layers) {
  return run_process({mt::testing_util::megatrain_bench(), "step", "--preset", "tiny", "--layers", layers, "--executor", "streaming",
                      "--recompute", "on", "--seq-len", "32", "--micro-batch", "2", "--global-batch", "4", "--steps",
                      "5", "--warmup", "1", "--precision", precision, "--json"});
}

TEST(BenchStepMixedPrecision, Bf16HalvesTheUploadedBytes) {
  const RunResult f = bench_step("fp32", "2"), b = bench_step("bf16", "2");
  ASSERT_EQ(f.rc, 0) << describe(f);
  ASSERT_EQ(b.rc, 0) << describe(b);
  const auto fj = f.json_lines(), bj = b.json_lines();
  ASSERT_EQ(fj.size(), 1u);
  ASSERT_EQ(bj.size(), 1u);
  EXPECT_EQ(fj[0].find("precision")->as_string(), "fp32");
  EXPECT_EQ(bj[0].find("precision")->as_string(), "bf16");
  EXPECT_EQ(bj[0].find("layers")->as_int(), 2) << "--layers overrides the preset's 4";
  const double h2d_f = double(fj[0].find("h2d_bytes")->as_int()), h2d_b = double(bj[0].find("h2d_bytes")->as_int());
  ASSERT_GT(h2d_f, 0);
  EXPECT_LE(h2d_b, 0.55 * h2d_f) << "bf16 weights cross the link in 2 bytes";
  // The same model and data a few steps in: bf16 rounding moves the loss by far less than 1%.
  const double loss_f = fj[0].find("loss")->as_double(), loss_b = bj[0].find("loss")->as_double();
  EXPECT_NEAR(loss_b, loss_f, 0.01 * loss_f);
}

TEST(BenchStepMixedPrecision, RefusesUnknownPrecisionAndBadLayers) {
  for (const auto& [precision, layers] : {std::pair{"fp16", "2"}, {"bf16", "-1"}, {"bf16", "1.5"}, {"bf16", "99999"}}) {
    const RunResult r = bench_step(precision, layers);
    EXPECT_EQ(r.rc, 2) << describe(r);
    EXPECT_TRUE(r.out.empty()) << describe(r);
    const std::string named = std::string(precision) == "fp16" ? "precision" : "--layers";
    EXPECT_NE(r.err.find(named), std::string::npos) << describe(r);
  }
}

// --peak-n sizes the GEMM the step's FLOP/s fraction is measured against (the CUDA emulation's
// bench smoke needs a small one); the JSON names it, and a size that is no whole number is refused.
TEST(BenchStep, PeakGemmSizeIsChosenAndNamed) {
  const auto step = [](const std::string& n) {
    return run_process({mt::testing_util::megatrain_bench(), "step", "--preset", "tiny", "--layers", "1", "--seq-len",
                        "16", "--micro-batch", "1", "--steps", "1", "--warmup", "0", "--peak-n", n, "--json"});
  };
  const RunResult ok = step("128");
  ASSERT_EQ(ok.rc, 0) << describe(ok);
  ASSERT_EQ(ok.json_lines().size(), 1u) << describe(ok);
  EXPECT_EQ(ok.json_lines()[0].find("peak_source")->as_string(), "cpu sgemm 128");
  for (const char* bad : {"-1", "1.5", "100000"}) {
    const RunResult r = step(bad);
    EXPECT_EQ(r.rc, 2) << describe(r);
    EXPECT_NE(r.err.find("--peak-n"), std::string::npos) << describe(r);
  }
}

// Streaming always recomputes: --recompute defaults to on there, and only an explicit off (a
// contradiction) is refused. The JSON says what ran.
TEST(BenchStep, StreamingDefaultsToRecomputeAndRefusesOnlyOff) {
  const std::vector<std::string> base = {mt::testing_util::megatrain_bench(), "step", "--preset", "tiny", "--layers", "1", "--seq-len",
                                         "16", "--micro-batch", "2", "--steps", "1", "--warmup", "0", "--json"};
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = base;
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_process(argv);
  };
  const RunResult streaming = run({"--executor", "streaming"});
  ASSERT_EQ(streaming.rc, 0) << describe(streaming);
  EXPECT_TRUE(streaming.json_lines().at(0).find("recompute")->as_bool());
  const RunResult resident = run({});
  ASSERT_EQ(resident.rc, 0) << describe(resident);
  EXPECT_FALSE(resident.json_lines().at(0).find("recompute")->as_bool()) << "resident keeps activations by default";
  const RunResult off = run({"--executor", "streaming", "--recompute", "off"});
  EXPECT_EQ(off.rc, 2) << describe(off);
  EXPECT_NE(off.err.find("--recompute off contradicts"), std::string::npos) << describe(off);
}

}  // namespace
}  // namespace mt::cli::testing

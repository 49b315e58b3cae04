// The NVMe tier through the CLI, as a user runs it: `megatrain train` with the Adam moments and
// the masters on a drive, killed with SIGKILL mid-run and run again, ends with the checkpoint
// bytes of an uninterrupted run that kept everything in memory; `megatrain plan` puts
// dense-120b on one H200 with 768 GB of host memory plus NVMe (not without the tier; in 512 GB
// only with grad_clip 0 and the gradients through a window: its bf16 gradients and shadow take
// 479 GB) and says what bandwidth its step needs of the drives; a tier path the job cannot use
// fails it naming the path.
#include <sys/vfs.h>

#include <csignal>
#include <map>

#include "engine/io/safetensors.h"
#include "tests/cli/cli_fixture.h"
#include "tests/engine/nvme_dir.h"

namespace mt::cli::testing {
namespace {

std::string tier_spec(long steps, const std::string& memory, const std::string& clip = "0.5") {
  return "name: nvme-cli\n"
         "model: {preset: tiny}\n"
         "init: {seed: 3}\n"
         "data: {source: synthetic, seed: 2}\n"
         "seq_len: 16\n"
         "micro_batch: 2\n"
         "global_batch: 4\n"
         "steps: " + std::to_string(steps) + "\n"
         "optimizer: {lr: 1.0e-2, grad_clip: " + clip + "}\n"
         "checkpoint: {every: 2, keep: 10}\n"
         "precision: bf16\n"
         "backend: cpu\n"
         "memory: " + memory + "\n";
}

std::string step_dir(const std::string& run, long step) {
  char name[32];
  std::snprintf(name, sizeof name, "/checkpoints/step-%08ld", step);
  return run + name;
}

// Each tensor of a safetensors file, by name: its dtype, shape and bytes (the layout of the file
// follows the optimizer's order, which an update-as-landed schedule reverses).
std::map<std::string, std::string> tensors_of(const std::string& path) {
  std::map<std::string, std::string> out;
  auto f = SafetensorsFile::open(path);
  EXPECT_TRUE(f.ok()) << path;
  if (!f.ok()) return out;
  for (const TensorInfo& t : (*f)->tensors()) {
    std::string key = std::to_string(int(t.dtype));
    for (int64_t d : t.shape) key += "," + std::to_string(d);
    out[t.name] = key + ":" + std::string(reinterpret_cast<const char*>((*f)->bytes(t)), size_t(t.end - t.begin));
  }
  return out;
}

// A run with the tier (its memory options `tier_memory`) killed with SIGKILL after step 5 and run
// again ends with the checkpoint bytes of an uninterrupted run that kept everything in memory.
void expect_killed_tier_run_resumes_to_memory_bytes(const std::string& name, const std::string& tier_memory,
                                                     const std::string& clip) {
  const std::string dir = fresh_dir(name);
  testing_util::NvmeDir drive("nvme-cli");
  const long steps = 20;  // the kill after step 5 lands within a page of step lines (train_and_kill)
  const std::string ram = write_file(dir + "/ram.yaml", tier_spec(steps, "{layout: compact}", clip));
  const std::string tier = write_file(
      dir + "/tier.yaml",
      tier_spec(steps, "{layout: compact, offload: nvme, nvme_paths: [" + drive.path + "], " + tier_memory + "}", clip));
  RunResult whole = megatrain({"train", ram, "--json", "--out", dir + "/ram"}, {}, 300);
  ASSERT_EQ(whole.rc, 0) << describe(whole);
  const KilledRun killed = train_and_kill(tier, dir + "/tier", 5);  // past the checkpoints of steps 2 and 4
  ASSERT_GT(killed.step, 0) << "the run must be killed, not end:\n" << killed.seen;
  ASSERT_LT(killed.step, steps);
  RunResult resumed = megatrain({"train", tier, "--json", "--out", dir + "/tier"}, {}, 300);
  ASSERT_EQ(resumed.rc, 0) << describe(resumed);
  for (long s : {4L, steps})
    for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
      const auto a = tensors_of(step_dir(dir + "/ram", s) + "/" + f);
      EXPECT_FALSE(a.empty()) << f << " of step " << s;
      EXPECT_TRUE(a == tensors_of(step_dir(dir + "/tier", s) + "/" + f))
          << f << " of step " << s << " differs between memory and the tier";
    }
  EXPECT_TRUE(fs::is_empty(drive.path)) << "the tier's scratch files outlive the job";
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

TEST(NvmeCli, KilledWithTheTierResumesToTheBytesOfARunInMemory) {
  expect_killed_tier_run_resumes_to_memory_bytes("nvme_resume", "nvme_masters: true, nvme_window: 2", "0.5");
}

// grad_clip 0 and the gradients through a window of 2 buffers: still the in-memory run's bytes.
TEST(NvmeCli, KilledWithTheGradWindowResumesToTheBytesOfARunInMemory) {
  expect_killed_tier_run_resumes_to_memory_bytes("nvme_grad_window", "nvme_masters: true, nvme_grad_window: 2", "0");
}

TEST(NvmeCli, PlansDense120bOnOneH200With768GBAndNvme) {
  const std::string dir = fresh_dir("nvme_plan");
  const std::string spec = write_file(dir + "/dense.yaml",
                                      "model: {preset: dense-120b}\nseq_len: 4096\nmicro_batch: 1\nglobal_batch: 16\n"
                                      "precision: bf16\nbackend: cuda\nmemory: {layout: compact}\n");
  const std::vector<std::string> tier = {"--offload", "nvme", "--nvme-paths", "/nvme0,/nvme1", "--nvme-masters",
                                         "--nvme-gbps", "12"};
  auto plan = [&](const std::string& host, bool tiered) {
    std::vector<std::string> a = {"plan", spec, "--host-memory", host, "--device-memory", "140GB", "--json"};
    if (tiered) a.insert(a.end(), tier.begin(), tier.end());
    RunResult r = megatrain(a);
    auto j = Json::parse(r.out.substr(0, r.out.find('\n')));  // the plan (then an error object when it does not fit)
    EXPECT_TRUE(j.ok()) << r.out;
    if (!j.ok()) return Json::object();
    EXPECT_EQ(r.rc, j->find("fits")->as_bool() ? 0 : 2) << describe(r);  // not fitting: RESOURCE_EXHAUSTED's code
    return *j;
  };
  const Json in_memory = plan("768GB", false);
  ASSERT_NE(in_memory.find("fits"), nullptr);
  EXPECT_FALSE(in_memory.find("fits")->as_bool()) << "dense-120b must not fit 768 GB without the tier";
  const Json t = plan("768GB", true);
  ASSERT_NE(t.find("fits"), nullptr);
  EXPECT_TRUE(t.find("fits")->as_bool()) << t.dump();
  EXPECT_LE(t.find("host_bytes")->as_int(), int64_t(768e9)) << t.dump();
  EXPECT_LT(t.find("host_bytes_per_param")->as_double(), 0.5 * in_memory.find("host_bytes_per_param")->as_double());
  const Json* n = t.find("nvme");
  ASSERT_NE(n, nullptr) << t.dump();
  EXPECT_EQ(n->find("paths")->as_int(), 2);
  EXPECT_GT(n->find("drive_bytes")->as_int(), int64_t(900e9)) << "moments and masters: 8 bytes a parameter";
  EXPECT_EQ(n->find("io_bytes_per_step")->as_int(), 2 * n->find("drive_bytes")->as_int());
  EXPECT_GT(n->find("needed_gbps")->as_double(), 0.0);
  EXPECT_NE(n->find("verdict")->as_string().find("GB/s"), std::string::npos);
  // 512 GB: what stays in memory with the tier, the bf16 gradients and shadow, is most of it.
  const Json small = plan("512GB", true);
  ASSERT_NE(small.find("fits"), nullptr);
  EXPECT_FALSE(small.find("fits")->as_bool()) << small.dump();
  const Json* kinds = small.find("host_by_kind");
  ASSERT_NE(kinds, nullptr);
  EXPECT_GT(kinds->find("grad")->as_int() + kinds->find("bf16_shadow")->as_int(), int64_t(0.93 * 512e9)) << small.dump();
  // Unless the gradients go too: with grad_clip 0 each unit updates as its gradient lands, and
  // the tiered units' gradients share a window of 4 buffers. Then it fits 512 GB.
  const std::string unclipped = write_file(dir + "/dense-unclipped.yaml",
                                           "model: {preset: dense-120b}\nseq_len: 4096\nmicro_batch: 1\nglobal_batch: 16\n"
                                           "precision: bf16\nbackend: cuda\nmemory: {layout: compact}\n"
                                           "optimizer: {grad_clip: 0}\n");
  RunResult windowed = megatrain({"plan", unclipped, "--host-memory", "512GB", "--device-memory", "140GB", "--json",
                                  "--offload", "nvme", "--nvme-paths", "/nvme0,/nvme1", "--nvme-masters",
                                  "--nvme-grad-window", "4", "--nvme-gbps", "12"});
  ASSERT_EQ(windowed.rc, 0) << describe(windowed);
  auto g = Json::parse(windowed.out);
  ASSERT_TRUE(g.ok()) << windowed.out;
  EXPECT_TRUE(g->find("fits")->as_bool()) << windowed.out;
  EXPECT_LE(g->find("host_bytes")->as_int(), int64_t(512e9)) << windowed.out;
  EXPECT_LT(g->find("host_by_kind")->find("grad")->as_int(), kinds->find("grad")->as_int() / 10) << windowed.out;
  // ... and with clipping the window is refused by name.
  RunResult clipped = megatrain({"plan", spec, "--host-memory", "512GB", "--offload", "nvme", "--nvme-grad-window", "4"});
  EXPECT_NE(clipped.rc, 0);
  EXPECT_NE(clipped.err.find("nvme_grad_window needs optimizer.grad_clip = 0"), std::string::npos) << describe(clipped);
  // The human form says the same.
  RunResult human = megatrain({"plan", spec, "--host-memory", "768GB", "--device-memory", "140GB", "--offload", "nvme",
                               "--nvme-masters"});
  ASSERT_EQ(human.rc, 0) << describe(human);
  EXPECT_NE(human.out.find("nvme tier"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("needs"), std::string::npos) << human.out;
  if (!HasFailure()) fs::remove_all(dir);
}

TEST(NvmeCli, ATierPathTheJobCannotUseFailsItNamingThePath) {
  const std::string dir = fresh_dir("nvme_bad");
  const std::string missing = dir + "/no-such-drive";
  const std::string spec = write_file(
      dir + "/bad.yaml", tier_spec(2, "{layout: compact, offload: nvme, nvme_paths: [" + missing + "]}"));
  RunResult r = megatrain({"train", spec, "--out", dir + "/run"}, {}, 120);
  EXPECT_NE(r.rc, 0) << describe(r);
  EXPECT_NE(r.err.find(missing), std::string::npos) << describe(r);
  struct statfs sf {};
  if (::statfs("/dev/shm", &sf) == 0 && long(sf.f_type) == 0x01021994) {  // tmpfs: host memory, refused
    const std::string shm = write_file(dir + "/shm.yaml",
                                       tier_spec(2, "{layout: compact, offload: nvme, nvme_paths: [/dev/shm]}"));
    RunResult s = megatrain({"train", shm, "--out", dir + "/shm-run"}, {}, 120);
    EXPECT_NE(s.rc, 0) << describe(s);
    EXPECT_NE(s.err.find("'/dev/shm' is on tmpfs"), std::string::npos) << describe(s);
  }
  if (!HasFailure()) fs::remove_all(dir);
}

}  // namespace
}  // namespace mt::cli::testing

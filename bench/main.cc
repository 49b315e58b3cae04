// megatrain-bench SUITE [--flag value ...] [--json]
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "bench/bench.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/base/omp_wait_policy.h"
#include "kernels/cpu_info.h"
#include "kernels/gemm_provider.h"

namespace mt::bench {

Result<Flags> Flags::parse(int argc, char** argv, int first) {
  Flags f;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") {
      f.json_ = true;
      continue;
    }
    if (a.rfind("--", 0) != 0 || i + 1 >= argc)
      return invalid_argument("expected --flag value, got '" + a + "'");
    f.values_[a.substr(2)] = argv[++i];
  }
  return f;
}

std::string Flags::str(const std::string& key, const std::string& def) const {
  used_[key] = true;
  auto it = values_.find(key);
  return it == values_.end() ? def : it->second;
}

Result<double> Flags::num(const std::string& key, double def) const {
  used_[key] = true;
  auto it = values_.find(key);
  if (it == values_.end()) return def;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end) return invalid_argument("--" + key + " = '" + it->second + "' is not a number");
  return v;
}

Status Flags::check_all_used() const {
  for (const auto& [k, v] : values_)
    if (!used_.count(k)) return invalid_argument("unknown flag --" + k);
  return Status::Ok();
}

void emit(const Json& measured, bool json) {
  Json result = measured;  // every result says which OpenMP wait policy and CPU kernels it ran on
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  result.set("omp_wait_policy", policy ? policy : "default");
  const Json machine = machine_fields();
  for (const auto& [k, v] : machine.members()) result.set(k, v);
  if (json) {
    std::printf("%s\n", result.dump().c_str());
  } else {
    for (const auto& [k, v] : result.members()) std::printf("%-24s %s\n", k.c_str(), v.dump().c_str());
  }
  std::fflush(stdout);
}

Json machine_fields() {
  const cpu::CpuInfo& c = cpu::cpu_info();
  const cpu::GemmProvider& g = cpu::gemm_provider();
  const cpu::GemmProvider& b = cpu::gemm_bf16_provider();
  Json fields = Json::object(
      {{"cpu", Json::object({{"model", c.model},
                             {"avx2", c.avx2},
                             {"fma", c.fma},
                             {"avx512f", c.avx512f},
                             {"avx512_bf16", c.avx512_bf16},
                             {"amx_bf16", c.amx_bf16}})},
       {"gemm_provider", g.name + (g.version.empty() ? "" : " " + g.version)},
       {"gemm_kernel", g.kernel},
       {"gemm_fallback", g.fallback},
       {"gemm_bf16_provider", b.name + (b.version.empty() ? "" : " " + b.version)},
       {"gemm_bf16_kernel", b.kernel},
       {"kernel_isa", cpu::isa_name(cpu::kernel_isa())}});
  fields.set("attention_kernel", cuda_attention_kernel_name());  // the bf16 default (MEGATRAIN_ATTENTION)
  fields.set("cudnn", cuda_cudnn_describe());
  if (!g.note.empty()) fields.set("gemm_note", g.note);
  if (!b.note.empty()) fields.set("gemm_bf16_note", b.note);
  return fields;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace mt::bench

int main(int argc, char** argv) {
  mt::use_passive_omp_wait_policy(argv);
  using namespace mt::bench;
  const char* usage =
      "usage: megatrain-bench SUITE [--flag value ...] [--json]\n"
      "suites:\n"
      "  sgemm  [--n 2048 --reps 5]                       fp32 GEMM GFLOP/s on this machine\n"
      "  cpu-gemm [--tokens 4096 --c 2048 --oc C --reps 3 --dtype fp32|bf16|both --providers all|chosen]\n"
      "         GFLOP/s of a layer's GEMMs (forward, both backward) per CPU GEMM provider\n"
      "  adamw  [--params N --threads T --reps 5]       fused AdamW vs a threaded memcpy\n"
      "  step   [--preset P | --model CONFIG.json] --seq-len T --micro-batch B --global-batch G [--backend cpu|cuda (streaming)]\n"
      "         [--executor resident|streaming] [--recompute on|off (streaming: on)] [--steps 5] [--warmup 2]\n"
      "         [--link-gbps G] [--slots K] [--checkpoints auto|device|host] [--layout exact|compact]\n"
      "         [--optimizer-threads N] [--active-vocab 8192] [--precision auto|fp32|bf16]\n"
      "         [--bf16-uploads shadow|convert] [--layers L] [--token-chunk N] [--nvme DIR[,DIR]]\n"
      "         [--checkpoint-stall DIR]  + the pause a checkpoint in DIR costs, between steps and beside them\n"
      "         [--doc-len N [--doc-spread on]]  rows packed with documents of N tokens (spread: 1 .. 2N-1)\n"
      "         [--peak-n N]  the square GEMM the peak is measured with (8192 on CUDA, 2048 on the CPU)\n"
      "  uploads [--params 5e7 --threads T --link-gbps 50] bf16 uploads: AdamW shadow vs uploader conversion\n"
      "  packing [--mean 115 --sigma 0.8 --seq-len 2048 --examples 52002 --window 64]  packing efficiency of\n"
      "         log-normal example lengths, packed vs one example per row\n"
      "  tokenize --tokenizer DIR --corpus FILE [--threads 1 --reps 3]  tokenizer.json encode tokens/s\n"
      "  checkpoint [--dir D --preset small | --params N --layout exact|compact --threads 4 --chunk-mib 16 --reps 3\n"
      "         --io direct,buffered,stream|all]  a checkpoint written and read (GB/s) vs dd-like O_DIRECT on D\n"
      "  plan   --preset P [--layout exact|compact --seq-len T --micro-batch B --global-batch G]\n"
      "  link   [--mib 512 --reps 10]                      pinned H2D/D2H/duplex GB/s vs cudaMemcpyAsync (CUDA)\n"
      "  gemm   [--tokens 8192 --reps 10]                  bf16 TFLOPS vs cublasGemmEx, qwen2.5-7b shapes, and the\n"
      "                                                     fp32-C weight-gradient GEMM (bf16 A/B) (CUDA)\n"
      "  pin    [--gib 16 --chunk-mib 1024 --threads 8]    cudaHostAlloc GB/s, one thread vs parallel (CUDA)\n"
      "  attention [--heads 32 --kv-heads 8 --head-dim 128 --max-seq 8192 --reps 3 --kernel cudnn|mma|simt|all]  fwd/bwd TFLOPS (CUDA)\n"
      "  kernels [--preset qwen2.5-7b --tokens 4096 --reps 10]  memory-bound kernels vs a device copy of their bytes (CUDA)\n";
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(usage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  auto flags = Flags::parse(argc, argv, 2);
  if (!flags.ok()) {
    std::fprintf(stderr, "megatrain-bench: %s\n", flags.status().message().c_str());
    return 2;
  }
  const std::string suite = argv[1];
  if (suite == "sgemm") return run_sgemm(*flags);
  if (suite == "adamw") return run_adamw(*flags);
  if (suite == "uploads") return run_uploads(*flags);
  if (suite == "cpu-gemm") return run_cpu_gemm(*flags);
  if (suite == "step") return run_step(*flags);
  if (suite == "plan") return run_plan(*flags);
  if (suite == "packing") return run_packing(*flags);
  if (suite == "tokenize") return run_tokenize(*flags);
  if (suite == "checkpoint") return run_checkpoint(*flags);
#ifdef MEGATRAIN_HAVE_CUDA
  if (suite == "link") return run_link(*flags);
  if (suite == "gemm") return run_gemm(*flags);
  if (suite == "attention") return run_attention(*flags);
  if (suite == "pin") return run_pin(*flags);
  if (suite == "kernels") return run_kernels(*flags);
#else
  if (suite == "link" || suite == "gemm" || suite == "attention" || suite == "pin" || suite == "kernels") {
    std::fprintf(stderr, "megatrain-bench: suite '%s' needs CUDA; this build has none (-DMEGATRAIN_CUDA=ON)\n",
                 suite.c_str());
    return 1;
  }
#endif

  std::fprintf(stderr, "megatrain-bench: unknown suite '%s'\n%s", suite.c_str(), usage);
  return 2;
}

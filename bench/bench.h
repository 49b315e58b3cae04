// Shared pieces of megatrain-bench: flag access, timing and the result printer.
#pragma once
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "engine/base/json.h"
#include "engine/base/status.h"
#include "engine/exec/executor.h"

namespace mt::bench {

// --key value flags after the suite name; every flag a suite reads must be known to it.
class Flags {
 public:
  static Result<Flags> parse(int argc, char** argv, int first);
  std::string str(const std::string& key, const std::string& def) const;
  Result<double> num(const std::string& key, double def) const;
  bool has(const std::string& key) const { return values_.count(key) > 0; }
  bool json() const { return json_; }
  // Errors for any flag the suite did not read (typos are not silently ignored).
  Status check_all_used() const;

 private:
  std::map<std::string, std::string> values_;
  mutable std::map<std::string, bool> used_;
  bool json_ = false;
};

// Prints one result: a JSON object on one line with --json, else "key: value" lines.
void emit(const Json& result, bool json);

// What every result carries about the machine: cpu (model, ISA flags), the GEMM providers and
// kernels in use, gemm_fallback, and the ISA variant of the vectorised kernels (kernel_isa).
Json machine_fields();

double seconds_since(std::chrono::steady_clock::time_point t0);
double median(std::vector<double> v);

// Runs `fn` once to warm up, then `reps` times; the median seconds of one run.
template <typename Fn>
double median_seconds(int reps, Fn&& fn) {
  fn();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(seconds_since(t0));
  }
  return median(t);
}

// Suites. Each returns the process exit status.
int run_sgemm(const Flags& f);
int run_adamw(const Flags& f);
int run_cpu_gemm(const Flags& f);  // bench_cpu_gemm.cc
int run_step(const Flags& f);
int run_plan(const Flags& f);
int run_uploads(const Flags& f);  // bench_uploads.cc
int run_packing(const Flags& f);  // bench_packing.cc
int run_tokenize(const Flags& f);  // bench_tokenizer.cc
int run_checkpoint(const Flags& f);  // bench_checkpoint.cc
#ifdef MEGATRAIN_HAVE_CUDA
int run_link(const Flags& f);       // bench_cuda.cc
int run_gemm(const Flags& f);
int run_attention(const Flags& f);
int run_pin(const Flags& f);
int run_kernels(const Flags& f);  // bench_kernels.cc
// Our device GEMM's FLOP/s at n x n x n in bf16 or fp32 (0 without a device): step's peak on CUDA.
double measure_device_gemm_flops(bool bf16, int n, int reps);
#endif

double measure_sgemm_flops(int n, int reps);  // for step's peak_flops

// step --checkpoint-stall DIR (bench_checkpoint_stall.cc): the pause a checkpoint in DIR costs the
// training, written between steps and beside them; `step` runs one more step of the executor.
Result<Json> measure_checkpoint_stall(Executor& ex, const ModelConfig& cfg, const std::function<Status()>& step,
                                      const std::string& dir);

}  // namespace mt::bench

// cpu-gemm: the GEMMs of one dense layer (forward out = x W^T, backward dx = dy W and
// dW += dy^T x) at a real size, for each CPU GEMM provider linked in (kernels/gemm_provider.h),
// fp32 and bf16 (bf16 A/B, fp32 C). One JSON line per provider and dtype, with a determinism
// check (the same inputs twice give the same bits) and, for bf16, the ratio to the chosen fp32
// provider measured in the same run.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "kernels/gemm_provider.h"
#include "kernels/matmul.h"

namespace mt::bench {
namespace {

struct Layer {
  int tokens, c, oc;
};

template <typename T>
std::vector<T> filled(size_t n, uint32_t seed) {
  std::vector<T> v(n);
  for (auto& x : v) {
    seed = seed * 1664525u + 1013904223u;
    const float f = float(int(seed >> 9) % 2001 - 1000) / 1000.0f;
    if constexpr (std::is_same_v<T, float>) x = f; else x = float_to_bf16(f);
  }
  return v;
}

void gemm_any(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
              float* C, int ldc) {
  cpu::gemm<float>(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, C, ldc);
}
void gemm_any(bool ta, bool tb, int M, int N, int K, const bf16* A, int lda, const bf16* B, int ldb,
              float* C, int ldc) {
  cpu::gemm_bf16(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 1.0f, C, ldc);
}

// GFLOP/s of forward, input gradient and weight gradient, and of the three together.
template <typename T>
Json measure(const Layer& l, int reps) {
  const auto x = filled<T>(size_t(l.tokens) * l.c, 1), w = filled<T>(size_t(l.oc) * l.c, 2);
  const auto dy = filled<T>(size_t(l.tokens) * l.oc, 3);
  std::vector<float> out(size_t(l.tokens) * l.oc), dx(size_t(l.tokens) * l.c), dw(size_t(l.oc) * l.c);
  const double flops = 2.0 * l.tokens * double(l.c) * l.oc;  // each of the three GEMMs
  // beta = 1 (the engine accumulates); the outputs grow with reps, which does not change speed.
  const double t_fwd = median_seconds(reps, [&] {
    gemm_any(false, true, l.tokens, l.oc, l.c, x.data(), l.c, w.data(), l.c, out.data(), l.oc);
  });
  const double t_dx = median_seconds(reps, [&] {
    gemm_any(false, false, l.tokens, l.c, l.oc, dy.data(), l.oc, w.data(), l.c, dx.data(), l.c);
  });
  const double t_dw = median_seconds(reps, [&] {
    gemm_any(true, false, l.oc, l.c, l.tokens, dy.data(), l.oc, x.data(), l.c, dw.data(), l.c);
  });
  // Determinism: the forward twice from the same C gives the same bits.
  std::vector<float> c1(out.size(), 0.5f), c2(out.size(), 0.5f);
  gemm_any(false, true, l.tokens, l.oc, l.c, x.data(), l.c, w.data(), l.c, c1.data(), l.oc);
  gemm_any(false, true, l.tokens, l.oc, l.c, x.data(), l.c, w.data(), l.c, c2.data(), l.oc);
  return Json::object({{"forward_gflops", flops / t_fwd / 1e9},
                       {"dinp_gflops", flops / t_dx / 1e9},
                       {"dweight_gflops", flops / t_dw / 1e9},
                       {"gflops", 3 * flops / (t_fwd + t_dx + t_dw) / 1e9},
                       {"deterministic", std::memcmp(c1.data(), c2.data(), c1.size() * 4) == 0}});
}

void report(Json m, const Layer& l, const std::string& dtype, const std::string& provider,
            double sgemm_gflops, bool json) {
  Json r = Json::object({{"suite", "cpu-gemm"}, {"dtype", dtype}, {"provider", provider},
                         {"tokens", int64_t(l.tokens)}, {"c", int64_t(l.c)}, {"oc", int64_t(l.oc)}});
  for (auto& [k, v] : m.members()) r.set(k, v);
  if (sgemm_gflops > 0) r.set("ratio_to_chosen_sgemm", m.find("gflops")->as_double() / sgemm_gflops);
  emit(r, json);
}

}  // namespace

int run_cpu_gemm(const Flags& f) {
  auto tokens = f.num("tokens", 4096), c = f.num("c", 2048), reps = f.num("reps", 3);
  auto oc = f.num("oc", 0);
  const std::string dtype = f.str("dtype", "both"), which = f.str("providers", "all");
  const bool ok_dtype = dtype == "fp32" || dtype == "bf16" || dtype == "both";
  if (!tokens.ok() || !c.ok() || !reps.ok() || !oc.ok() || !ok_dtype ||
      (which != "all" && which != "chosen") || !f.check_all_used().ok() || *tokens < 1 ||
      *c < 1 || *oc < 0 || *reps < 1 || *tokens > 65536 || *c > 65536 || *oc > 65536) {
    std::fprintf(stderr, "cpu-gemm: bad flags (--tokens --c --oc 1..65536, --reps, --dtype fp32|bf16|both, --providers all|chosen)\n");
    return 2;
  }
  const Layer l{int(*tokens), int(*c), *oc > 0 ? int(*oc) : int(*c)};
  const std::string chosen = cpu::gemm_provider().name, chosen_bf16 = cpu::gemm_bf16_provider().name;
  // The chosen fp32 provider first: the bf16 lines are compared with it.
  const Json base = measure<float>(l, int(*reps));
  const double sgemm = base.find("gflops")->as_double();
  if (dtype != "bf16") {
    report(base, l, "fp32", chosen + " (chosen)", 0, f.json());
    for (const auto& p : cpu::linked_gemm_providers()) {
      if (which == "chosen" || p == chosen || !cpu::use_gemm_provider(p)) continue;
      report(measure<float>(l, int(*reps)), l, "fp32", p, 0, f.json());
    }
    cpu::use_gemm_provider(chosen);
  }
  if (dtype != "fp32") {
    for (const auto& p : cpu::linked_gemm_bf16_providers()) {
      if ((which == "chosen" && p != chosen_bf16) || !cpu::use_gemm_bf16_provider(p)) continue;
      report(measure<bf16>(l, int(*reps)), l, "bf16", p == chosen_bf16 ? p + " (chosen)" : p, sgemm,
             f.json());
    }
    cpu::use_gemm_bf16_provider(chosen_bf16);
  }
  return 0;
}

}  // namespace mt::bench

// The step suite: full optimizer steps of a preset, timed, with model FLOPs and the fraction of
// this machine's measured sgemm peak they reach. Model FLOPs per token count 6 x the matmul
// parameters (LM head included, embedding lookup not) plus causal attention 6 x L x T x q_dim;
// recompute and padding are not counted.
#include <cstdio>

#include "bench/bench.h"
#include "engine/resident_executor.h"

namespace mt::bench {

double model_flops_per_token(const ModelConfig& c, int seq_len) {
  const double C = c.hidden_size, F = c.intermediate_size;
  const double per_layer = double(c.qkv_dim()) * C + C * c.q_dim() + 3 * F * C;
  const double matmul_params = c.num_layers * per_layer + double(c.vocab_size) * C;
  return 6 * matmul_params + 6.0 * c.num_layers * seq_len * c.q_dim();
}

namespace {

struct StepArgs {
  std::string preset, executor, backend;
  TrainOptions opt;
  int steps = 5, warmup = 2;
};

Result<StepArgs> parse_step_args(const Flags& f) {
  StepArgs a;
  a.preset = f.str("preset", "tiny");
  a.executor = f.str("executor", "resident");
  a.backend = f.str("backend", "cpu");
  MT_ASSIGN_OR_RETURN(double T, f.num("seq-len", 128));
  MT_ASSIGN_OR_RETURN(double mb, f.num("micro-batch", 8));
  MT_ASSIGN_OR_RETURN(double gb, f.num("global-batch", mb));
  MT_ASSIGN_OR_RETURN(double steps, f.num("steps", 5));
  MT_ASSIGN_OR_RETURN(double warmup, f.num("warmup", 2));
  const std::string recompute = f.str("recompute", "off");
  MT_ASSIGN_OR_RETURN(a.opt.layout, parse_memory_layout(f.str("layout", "exact")));
  if (recompute != "on" && recompute != "off") return invalid_argument("--recompute must be on or off");
  a.opt.seq_len = int(T);
  a.opt.micro_batch = int(mb);
  a.opt.global_batch = int(gb);
  a.opt.recompute = recompute == "on";
  a.steps = int(steps);
  a.warmup = int(warmup);
  if (a.backend != "cpu") return invalid_argument("--backend " + a.backend + " is not built in this binary");
  if (a.executor != "resident") return invalid_argument("--executor " + a.executor + " is not available");
  MT_RETURN_IF_ERROR(f.check_all_used());
  return a;
}

}  // namespace

int run_step(const Flags& f) {
  auto args = parse_step_args(f);
  if (!args.ok()) {
    std::fprintf(stderr, "step: %s\n", args.status().message().c_str());
    return 2;
  }
  auto cfg = preset_config(args->preset);
  if (!cfg.ok()) {
    std::fprintf(stderr, "step: %s\n", cfg.status().message().c_str());
    return 2;
  }
  const TrainOptions& opt = args->opt;
  auto ex = ResidentExecutor::create(*cfg, opt);
  if (!ex.ok()) {
    std::fprintf(stderr, "step: %s\n", ex.status().message().c_str());
    return 2;
  }
  init_weights(*cfg, (*ex)->store(), 1);
  auto src = make_synthetic_source({1, cfg->vocab_size, 64, 4});
  Batch batch;
  std::vector<double> times;
  double loss = 0;
  for (int s = 0; s < args->warmup + args->steps; ++s) {
    if (!(*src)->next_batch(opt.global_batch, opt.seq_len, batch).ok()) return 1;
    auto st = (*ex)->step(batch);
    if (!st.ok()) {
      std::fprintf(stderr, "step: %s\n", st.status().message().c_str());
      return 1;
    }
    if (s >= args->warmup) times.push_back(st->step_seconds);
    loss = st->loss;
  }
  const double step_s = median(times), tokens = double(opt.global_batch) * opt.seq_len;
  const double fpt = model_flops_per_token(*cfg, opt.seq_len), achieved = fpt * tokens / step_s;
  const double peak = measure_sgemm_flops(2048, 3);
  emit(Json::object({{"suite", "step"},
                     {"preset", args->preset},
                     {"backend", args->backend},
                     {"executor", args->executor},
                     {"recompute", opt.recompute},
                     {"seq_len", opt.seq_len},
                     {"micro_batch", opt.micro_batch},
                     {"global_batch", opt.global_batch},
                     {"params", cfg->num_params()},
                     {"step_seconds", step_s},
                     {"tokens_per_second", tokens / step_s},
                     {"model_flops_per_token", fpt},
                     {"achieved_flops", achieved},
                     {"peak_flops", peak},
                     {"flops_fraction", achieved / peak},
                     {"loss", loss}}),
       f.json());
  return 0;
}

}  // namespace mt::bench

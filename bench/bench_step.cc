// The step suite: full optimizer steps of a preset, timed, with model FLOPs and the fraction of
// this machine's measured sgemm peak they reach. Model FLOPs per token count 6 x the matmul
// parameters (LM head included, embedding lookup not) plus causal attention 6 x L x T x q_dim;
// recompute and padding are not counted.
#include <algorithm>
#include <cstdio>

#include "bench/bench.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/exec/resident_executor.h"
#include "engine/exec/streaming_executor.h"

namespace mt::bench {

namespace {

struct StepArgs {
  std::string preset, executor, backend;
  std::string model;  // a config.json (file or directory) instead of the preset
  TrainOptions opt;
  StreamingOptions so;
  int steps = 5, warmup = 2;
  int active_vocab = 0;  // distinct tokens the synthetic data draws from
  int doc_len = 0;       // > 0: each row packs documents of this many tokens (attention masked to each)
  bool doc_spread = false;  // documents of 1 .. 2 doc_len - 1 tokens (mean doc_len), new ones each step
  int layers = 0;        // > 0: the preset's shape with this many decoder layers
  std::string checkpoint_dir;  // --checkpoint-stall DIR: also the pause a checkpoint there costs
  int peak_n = 0;  // --peak-n: the square GEMM the peak is measured with (0: 8192 on CUDA, 2048 on the CPU)
};

// --nvme DIR[,DIR] [--nvme-masters on] [--nvme-window N] [--nvme-io-threads N]: the NVMe tier.
Status parse_nvme_args(const Flags& f, NvmeTierOptions& o) {
  const std::string paths = f.str("nvme", "");
  for (size_t at = 0; at < paths.size();) {
    const size_t comma = std::min(paths.find(',', at), paths.size());
    if (comma > at) o.paths.push_back(paths.substr(at, comma - at));
    at = comma + 1;
  }
  const std::string masters = f.str("nvme-masters", "off");
  if (masters != "on" && masters != "off") return invalid_argument("--nvme-masters must be on or off");
  o.masters = masters == "on";
  MT_ASSIGN_OR_RETURN(double window, f.num("nvme-window", 4));
  MT_ASSIGN_OR_RETURN(double threads, f.num("nvme-io-threads", 4));
  if (!(window >= 1 && window <= 64 && threads >= 1 && threads <= 64))
    return invalid_argument("--nvme-window and --nvme-io-threads must be in 1..64");
  o.window = int(window);
  o.io_threads = int(threads);
  return Status::Ok();
}

Result<StepArgs> parse_step_args(const Flags& f) {
  StepArgs a;
  a.preset = f.str("preset", "tiny");
  a.model = f.str("model", "");
  a.checkpoint_dir = f.str("checkpoint-stall", "");
  a.backend = f.str("backend", "cpu");
  // Defaults are what the choice implies: CUDA streams, and streaming always recomputes.
  a.executor = f.str("executor", a.backend == "cuda" ? "streaming" : "resident");
  MT_ASSIGN_OR_RETURN(double T, f.num("seq-len", 128));
  MT_ASSIGN_OR_RETURN(double mb, f.num("micro-batch", 8));
  MT_ASSIGN_OR_RETURN(double gb, f.num("global-batch", mb));
  MT_ASSIGN_OR_RETURN(double steps, f.num("steps", 5));
  MT_ASSIGN_OR_RETURN(double warmup, f.num("warmup", 2));
  const std::string recompute = f.str("recompute", a.executor == "streaming" ? "on" : "off");
  MT_ASSIGN_OR_RETURN(a.opt.layout, parse_memory_layout(f.str("layout", "exact")));
  const std::string precision = f.str("precision", "auto");
  MT_ASSIGN_OR_RETURN(a.opt.precision, resolve_precision(precision, a.backend == "cuda"));
  MT_ASSIGN_OR_RETURN(double layers, f.num("layers", 0));
  if (!(layers >= 0 && layers <= ModelLimits::kLayers) || layers != double(int(layers)))
    return invalid_argument("--layers must be a whole number from 1 to " + std::to_string(ModelLimits::kLayers) +
                            " (0 or absent: the preset's)");
  a.layers = int(layers);
  MT_ASSIGN_OR_RETURN(double peak_n, f.num("peak-n", 0));
  if (!(peak_n >= 0 && peak_n <= 65536) || peak_n != double(int(peak_n)))
    return invalid_argument("--peak-n must be a whole number up to 65536 (0 or absent: 8192 on CUDA, 2048 on the CPU)");
  a.peak_n = int(peak_n);
  if (recompute != "on" && recompute != "off") return invalid_argument("--recompute must be on or off");
  a.opt.seq_len = int(T);
  a.opt.micro_batch = int(mb);
  a.opt.global_batch = int(gb);
  a.opt.recompute = recompute == "on";
  a.steps = int(steps);
  a.warmup = int(warmup);
  if (a.backend != "cpu" && a.backend != "cuda") return invalid_argument("--backend " + a.backend + " is not one of cpu, cuda");
  if (a.backend == "cuda" && a.executor != "streaming")
    return invalid_argument("--backend cuda runs the streaming executor, not --executor " + a.executor);
  if (a.executor != "resident" && a.executor != "streaming")
    return invalid_argument("--executor " + a.executor + " is not one of resident, streaming");
  MT_ASSIGN_OR_RETURN(double link, f.num("link-gbps", 0));
  MT_ASSIGN_OR_RETURN(double slots, f.num("slots", 2));
  MT_ASSIGN_OR_RETURN(double opt_threads, f.num("optimizer-threads", 0));
  // The embedding moves only a batch's distinct tokens; 8192 keeps that share realistic.
  MT_ASSIGN_OR_RETURN(double active_vocab, f.num("active-vocab", 8192));
  if (active_vocab < 1) return invalid_argument("--active-vocab must be >= 1");
  a.active_vocab = int(active_vocab);
  MT_ASSIGN_OR_RETURN(double doc_len, f.num("doc-len", 0));
  if (!(doc_len >= 0 && doc_len <= TrainLimits::kSeqLen)) return invalid_argument("--doc-len must be in [0, 2^20]");
  a.doc_len = int(doc_len);
  const std::string spread = f.str("doc-spread", "off");
  if ((spread != "on" && spread != "off") || (spread == "on" && a.doc_len == 0))
    return invalid_argument("--doc-spread must be on or off, and on only with --doc-len");
  a.doc_spread = spread == "on";
  a.opt.optimizer_threads = int(opt_threads);
  MT_ASSIGN_OR_RETURN(a.so.placement, parse_checkpoint_placement(f.str("checkpoints", "auto")));
  a.so.link_gbps = link;
  a.so.slots = int(slots);
  MT_ASSIGN_OR_RETURN(a.so.bf16_uploads, parse_bf16_uploads(f.str("bf16-uploads", "shadow")));
  MT_ASSIGN_OR_RETURN(a.so.speculation, parse_speculation(f.str("speculative-updates", "off")));
  // A slower host: each unit's AdamW takes this many times as long (the CPU reproduces a GPU
  // step's proportions, where device compute is fast next to the host's optimizer).
  MT_ASSIGN_OR_RETURN(a.so.optimizer_slowdown, f.num("optimizer-slowdown", 1));
  if (!(a.so.optimizer_slowdown >= 1 && a.so.optimizer_slowdown <= 1000))
    return invalid_argument("--optimizer-slowdown must be in [1, 1000]");
  MT_RETURN_IF_ERROR(parse_nvme_args(f, a.so.nvme));
  MT_ASSIGN_OR_RETURN(double clip, f.num("grad-clip", 1.0));
  a.opt.optimizer.grad_clip = float(clip);
  // A device budget in GiB (0: the device's own): the planner chunks and places to fit it.
  MT_ASSIGN_OR_RETURN(double device_gib, f.num("device-gib", 0));
  if (!(device_gib >= 0 && device_gib < 1e6)) return invalid_argument("--device-gib must be in [0, 1e6)");
  a.so.device_budget = uint64_t(device_gib * double(uint64_t(1) << 30));
  MT_ASSIGN_OR_RETURN(double token_chunk, f.num("token-chunk", 0));
  if (token_chunk < 0) return invalid_argument("--token-chunk must be >= 0");
  a.opt.token_chunk = int(token_chunk);
  if (a.executor == "streaming" && !a.opt.recompute)
    return invalid_argument("--executor streaming always recomputes from layer inputs; --recompute off contradicts it");
  MT_RETURN_IF_ERROR(f.check_all_used());
  return a;
}

Result<std::unique_ptr<Executor>> make_bench_executor(const ModelConfig& cfg, const StepArgs& a) {
  if (a.executor == "resident") {
    MT_ASSIGN_OR_RETURN(auto ex, ResidentExecutor::create(cfg, a.opt));
    return std::unique_ptr<Executor>(std::move(ex));
  }
  if (a.backend == "cuda") {  // Unimplemented without CUDA in this build, FailedPrecondition without a device
    CudaBackendOptions o;  // cuDNN attention's workspace for a micro-batch, when it is the kernel
    o.attention_workspace_bytes = cuda_attention_workspace_bytes(int(a.opt.micro_batch), int(a.opt.seq_len),
                                                                 cfg.num_heads, cfg.num_kv_heads, cfg.head_dim);
    MT_ASSIGN_OR_RETURN(auto be, make_cuda_backend(o));
    MT_ASSIGN_OR_RETURN(auto ex, StreamingExecutor::create(cfg, a.opt, a.so, std::move(be)));
    return std::unique_ptr<Executor>(std::move(ex));
  }
  MT_ASSIGN_OR_RETURN(auto ex, StreamingExecutor::create_cpu(cfg, a.opt, a.so));
  return std::unique_ptr<Executor>(std::move(ex));
}

// Each row of `batch` as packed documents (positions restarting at 0 where one begins): of
// doc_len tokens, or with --doc-spread of 1 .. 2 doc_len - 1 (new lengths each `seed`), so that
// cuDNN meets the shapes of real packed data (graphs per document count and longest document).
void pack_documents(const StepArgs& a, int T, uint64_t seed, Batch& batch) {
  batch.positions.resize(batch.inputs.size());
  uint64_t x = seed * 0x9e3779b97f4a7c15ull;
  auto next_len = [&] {
    if (!a.doc_spread) return a.doc_len;
    x += 0x9e3779b97f4a7c15ull;  // splitmix64
    uint64_t z = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return 1 + int((z ^ (z >> 31)) % uint64_t(2 * a.doc_len - 1));
  };
  for (size_t row = 0; row * size_t(T) < batch.positions.size(); ++row)
    for (int t = 0, left = 0, pos = 0; t < T; ++t, ++pos, --left) {
      if (left == 0) left = next_len(), pos = 0;
      batch.positions[row * size_t(T) + size_t(t)] = pos;
    }
}

uint64_t host_bytes_of(Executor& ex) {
  if (auto* s = dynamic_cast<StreamingExecutor*>(&ex)) return s->host_bytes();
  return ex.store().total_bytes();
}

// The shortest step any exact schedule could take with this step's compute, bytes and link.
// Clipping by the global norm makes every update wait for the last gradient, so every weight
// read before the LM head can start crosses the link after the previous step's last gradient
// has landed; the head and backward compute follow, and the last gradient (the embedding's)
// is copied after the last compute:
//   step >= max(forward compute, forward H2D bytes / H2D bandwidth)
//         + backward compute + last gradient bytes / D2H bandwidth.
double exact_step_floor(const StepStats& s) {
  const double up = s.h2d_bandwidth(), down = s.d2h_bandwidth();
  const double fwd_link = up > 0 ? double(s.forward_h2d_bytes) / up : 0;
  const double tail = down > 0 ? double(s.last_grad_bytes) / down : 0;
  return std::max(s.forward_compute_seconds, fwd_link) + (s.compute_seconds - s.forward_compute_seconds) + tail;
}

// Per-step medians of the streaming counters. Transfer time is the busier direction (the link
// is full duplex); overlap_efficiency = max(compute, transfer) / step time.
void add_streaming_keys(Json& out, const std::vector<StepStats>& st, double step_s, double link_gbps) {
  auto med = [&](auto field) {
    std::vector<double> v;
    for (const auto& s : st) v.push_back(double(field(s)));
    return median(v);
  };
  const double compute = med([](const StepStats& s) { return s.compute_seconds; });
  const double transfer = med([](const StepStats& s) { return std::max(s.h2d_seconds, s.d2h_seconds); });
  out.set("link_gbps", link_gbps);  // the emulated link's cap (--link-gbps; 0: none)
  out.set("h2d_gbps", med([](const StepStats& s) { return s.h2d_bandwidth(); }) / 1e9);  // measured
  out.set("d2h_gbps", med([](const StepStats& s) { return s.d2h_bandwidth(); }) / 1e9);
  out.set("h2d_bytes", int64_t(med([](const StepStats& s) { return s.h2d_bytes; })));
  out.set("d2h_bytes", int64_t(med([](const StepStats& s) { return s.d2h_bytes; })));
  out.set("compute_seconds", compute);
  out.set("transfer_seconds", transfer);
  out.set("stall_seconds", med([](const StepStats& s) { return s.stall_seconds(); }));
  out.set("optimizer_wait_seconds", med([](const StepStats& s) { return s.optimizer_wait_seconds; }));  // of the stall
  out.set("copy_wait_seconds", med([](const StepStats& s) { return s.copy_wait_seconds; }));
  out.set("optimizer_seconds", med([](const StepStats& s) { return s.optimizer_seconds; }));
  out.set("overlap_efficiency", std::max(compute, transfer) / step_s);
  const double floor_s = med([](const StepStats& s) { return exact_step_floor(s); });
  out.set("forward_compute_seconds", med([](const StepStats& s) { return s.forward_compute_seconds; }));
  out.set("forward_h2d_bytes", int64_t(med([](const StepStats& s) { return s.forward_h2d_bytes; })));
  out.set("step_floor_seconds", floor_s);
  out.set("overlap_bound", floor_s > 0 ? std::min(1.0, std::max(compute, transfer) / floor_s) : 1.0);
  out.set("schedule_efficiency", floor_s / step_s);
  out.set("embedding_rows", int64_t(med([](const StepStats& s) { return s.embedding_rows; })));
  out.set("last_grad_bytes", int64_t(med([](const StepStats& s) { return s.last_grad_bytes; })));
  out.set("device_peak_bytes", int64_t(st.empty() ? 0 : st.back().device_peak_bytes));
}

template <typename F>
double median_of(const std::vector<StepStats>& st, F field) {
  std::vector<double> v;
  for (const auto& s : st) v.push_back(double(field(s)));
  return v.empty() ? 0.0 : median(v);
}

// A mixture of experts: its active parameters and the count on them (the published systems'
// 6 * active params * tokens), the load-balancing loss, and the routing of the last step — the
// experts uploaded of all and their bytes against uploading every expert, and per MoE layer its
// busiest expert's load over the mean.
void add_moe_keys(Json& out, const ModelConfig& cfg, const std::vector<StepStats>& st, double tokens_per_second,
                  uint64_t elem_bytes) {
  const int64_t active = cfg.num_active_params();
  out.set("active_params", active);
  out.set("model_tflops_6nt_active", 6.0 * double(active) * tokens_per_second / 1e12);
  out.set("num_experts", cfg.moe.num_experts);
  out.set("experts_per_token", cfg.moe.top_k);
  if (st.empty()) return;
  const StepStats& s = st.back();
  out.set("aux_loss", s.aux_loss);
  out.set("experts_routed", int64_t(s.experts_routed));
  out.set("experts_total", int64_t(s.experts_total));
  out.set("expert_h2d_bytes", int64_t(s.expert_h2d_bytes));
  out.set("dense_expert_h2d_bytes", int64_t(s.dense_expert_h2d_bytes));
  out.set("expert_h2d_fraction",
          s.dense_expert_h2d_bytes ? double(s.expert_h2d_bytes) / double(s.dense_expert_h2d_bytes) : 0.0);
  // Issue 28's bound: the step's measured H2D bytes (the backend's copy counters) against the
  // routed experts (forward and backward) plus every other unit whole, twice.
  uint64_t dense_bytes = 0;
  for (const ParamSchema& u : build_param_schemas(cfg))
    if (u.kind != UnitKind::kExpert) dense_bytes += u.numel * elem_bytes;
  const double ideal = double(2 * dense_bytes + s.expert_h2d_bytes);
  out.set("h2d_over_routed_ideal", ideal > 0 ? double(s.h2d_bytes) / ideal : 0.0);
  Json load = Json::array();
  for (double x : s.expert_load) load.items().push_back(Json(x));
  out.set("expert_load", load);
}

}  // namespace

int run_step(const Flags& f) {
  auto args = parse_step_args(f);
  if (!args.ok()) {
    std::fprintf(stderr, "step: %s\n", args.status().message().c_str());
    return 2;
  }
  auto cfg = args->model.empty() ? preset_config(args->preset) : load_model_config(args->model);
  if (!cfg.ok()) {
    std::fprintf(stderr, "step: %s\n", cfg.status().message().c_str());
    return 2;
  }
  if (args->layers > 0) cfg->set_num_layers(args->layers);  // a real layer shape, fewer of them
  const TrainOptions& opt = args->opt;
  // Setup, timed: on the GPU machine it was most of each bench's wall time (2026-11-30: ~110 s of
  // 120 for 4 layers of qwen2.5-7b), and the device window is short.
  const auto t_alloc = std::chrono::steady_clock::now();
  auto ex = make_bench_executor(*cfg, *args);
  if (!ex.ok()) {
    std::fprintf(stderr, "step: %s\n", ex.status().message().c_str());
    return 2;
  }
  const double alloc_s = seconds_since(t_alloc);
  const auto t_init = std::chrono::steady_clock::now();
  init_weights(*cfg, (*ex)->store(), 1);
  const double init_s = seconds_since(t_init);
  auto src = make_synthetic_source({1, cfg->vocab_size, args->active_vocab, 4});
  Batch batch;
  std::vector<double> times;
  std::vector<StepStats> measured;
  double loss = 0;
  uint64_t doc_seed = 0;
  auto next_step = [&]() -> Result<StepStats> {
    MT_RETURN_IF_ERROR((*src)->next_batch(opt.global_batch, opt.seq_len, batch));
    if (args->doc_len > 0) pack_documents(*args, opt.seq_len, ++doc_seed, batch);
    return (*ex)->step(batch);
  };
  for (int s = 0; s < args->warmup + args->steps; ++s) {
    auto st = next_step();
    if (!st.ok()) {
      std::fprintf(stderr, "step: %s\n", st.status().message().c_str());
      return 1;
    }
    if (s >= args->warmup) times.push_back(st->step_seconds), measured.push_back(*st);
    loss = st->loss;
  }
  Json stall = Json::object();  // measured after everything else: it adds steps
  if (!args->checkpoint_dir.empty()) {
    auto m = measure_checkpoint_stall(**ex, *cfg, [&] { return next_step().status(); }, args->checkpoint_dir);
    if (!m.ok()) {
      std::fprintf(stderr, "step: checkpoint: %s\n", m.status().message().c_str());
      return 1;
    }
    stall = std::move(*m);
  }
  // Held-out evaluation of the same shape (the last batch, as many rows as one evaluation takes):
  // forward only, where a step is forward + recompute + backward.
  Batch held = batch;
  held.num_seqs = std::min(opt.global_batch, (*ex)->eval_batch_rows());
  for (auto* v : {&held.inputs, &held.targets, &held.positions})
    if (!v->empty()) v->resize(size_t(held.num_seqs) * size_t(opt.seq_len));
  std::vector<double> eval_times;
  for (int s = 0; s < std::max(1, args->steps); ++s) {
    auto e = (*ex)->evaluate(held);
    if (!e.ok()) {
      std::fprintf(stderr, "step: evaluation: %s\n", e.status().message().c_str());
      return 1;
    }
    eval_times.push_back(e->seconds);
  }
  const double eval_s = median(eval_times), eval_tokens = double(held.num_seqs) * opt.seq_len;
  const double step_s = median(times), tokens = double(opt.global_batch) * opt.seq_len;
  // Attention within the packed documents (--doc-len; with --doc-spread, counted as documents
  // of the mean length, which undercounts the longer ones' pairs a little).
  const double fpt = model_flops_per_token(*cfg, opt.seq_len, args->doc_len), achieved = fpt * tokens / step_s;
  // The peak this step is measured against: the GEMM of the device it ran on, in its precision.
  double peak = 0;
  const int cpu_n = args->peak_n > 0 ? args->peak_n : 2048;
  std::string peak_source = "cpu sgemm " + std::to_string(cpu_n);
#ifdef MEGATRAIN_HAVE_CUDA
  if (args->backend == "cuda") {
    const bool bf16 = opt.precision == Precision::kBf16;
    const int n = args->peak_n > 0 ? args->peak_n : 8192;
    peak = measure_device_gemm_flops(bf16, n, 3);
    peak_source = std::string("cuda gemm ") + (bf16 ? "bf16 " : "fp32 ") + std::to_string(n);
  }
#endif
  if (peak <= 0) peak = measure_sgemm_flops(cpu_n, 3);
  Json out = Json::object({{"suite", "step"},
                     {"preset", args->model.empty() ? args->preset : args->model},
                     {"architecture", cfg->architecture},
                     {"backend", args->backend},
                     {"executor", args->executor},
                     {"precision", precision_name(opt.precision)},
                     {"layers", cfg->num_layers},
                     {"bf16_uploads", args->so.bf16_uploads == Bf16Uploads::kShadow ? "shadow" : "convert"},
                     {"host_bytes", int64_t(host_bytes_of(**ex))},
                     {"setup_alloc_seconds", alloc_s},  // executor and host store (pinned on CUDA)
                     {"setup_init_seconds", init_s},    // weights, moments and gradients
                     {"recompute", opt.recompute},
                     {"seq_len", opt.seq_len},
                     {"micro_batch", opt.micro_batch},
                     {"doc_len", args->doc_len},
                     {"doc_spread", args->doc_spread},
                     {"global_batch", opt.global_batch},
                     {"params", cfg->num_params()},
                     {"step_seconds", step_s},
                     {"tokens_per_second", tokens / step_s},
                     {"model_flops_per_token", fpt},
                     {"achieved_flops", achieved},
                     // The published MegaTrain's count (6 * params * tokens), and ours with attention.
                     {"model_tflops_6nt", 6.0 * double(cfg->num_params()) * tokens / step_s / 1e12},
                     {"model_tflops", achieved / 1e12},
                     {"peak_flops", peak},
                     {"peak_source", peak_source},
                     {"flops_fraction", achieved / peak},
                     {"loss", loss},
                     // The CPU optimizer's share (resident: serial after the compute; streaming: overlapped)
                     {"update_seconds", median_of(measured, [](const StepStats& s) { return s.optimizer_seconds; })},
                     {"eval_seconds", eval_s},
                     {"eval_tokens_per_second", eval_tokens / eval_s},
                     // The target: >= 2.5 (a step computes the forward about 3 times over).
                     {"eval_speedup", eval_tokens / eval_s / (tokens / step_s)}});
  if (cfg->has_experts()) add_moe_keys(out, *cfg, measured, tokens / step_s, compute_elem_bytes(opt.precision));
  // Whether cuDNN ran at all: attention_kernel says what was asked, a refused shape falls back.
  if (args->backend == "cuda") {
    const uint64_t cudnn_calls = cuda_cudnn_attention_calls();
    out.set("cudnn_attention_calls", int64_t(cudnn_calls));
    if (cuda_attention_kernel_name() == "cudnn" && cudnn_calls == 0 && opt.precision == Precision::kBf16)
      std::fprintf(stderr, "step: cuDNN attention was asked for but ran no call (%s): the step's attention ran on the "
                   "fallback kernel\n", cuda_cudnn_describe().c_str());
    // Graph builds run inside steps (the first of each shape): their seconds are in the warmup
    // steps or, for a shape first met later, in a measured one.
    const CudnnBuildTotals b = cuda_cudnn_graph_builds();
    out.set("cudnn_graphs_built", int64_t(b.graphs));
    out.set("cudnn_graph_build_seconds", b.seconds);
  }
  if (args->executor == "streaming") {
    add_streaming_keys(out, measured, step_s, args->so.link_gbps);
    const MemoryPlan& plan = static_cast<StreamingExecutor&>(**ex).plan();  // what it reserved
    out.set("plan_device_bytes", int64_t(plan.device_bytes));
    out.set("token_chunk", plan.token_chunk);
    out.set("speculative_updates", speculation_name(args->so.speculation));
    out.set("speculative_units", plan.speculative_units);
    out.set("optimizer_slowdown", args->so.optimizer_slowdown);
    auto& pipe = static_cast<StreamingExecutor&>(**ex).pipeline();
    out.set("speculated_updates", int64_t(pipe.speculated_updates()));
    out.set("rolled_back_updates", int64_t(pipe.rolled_back_updates()));
    if (const NvmeTier* tier = (*ex)->store().tier()) {  // the drives' share: bytes a step moved
      const double steps = double(args->warmup + args->steps);
      out.set("nvme_paths", int64_t(args->so.nvme.paths.size()));
      out.set("nvme_masters", args->so.nvme.masters);
      out.set("nvme_window", args->so.nvme.window);
      out.set("nvme_file_bytes", int64_t(tier->file_bytes()));
      out.set("nvme_read_bytes_per_step", double(tier->bytes_read()) / steps);
      out.set("nvme_written_bytes_per_step", double(tier->bytes_written()) / steps);
    }
  }
  for (const auto& [key, value] : stall.members()) out.set(key, value);
  emit(out, f.json());
  return 0;
}

}  // namespace mt::bench

#include "engine/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

namespace mt {

Status validate(const OptimizerConfig& c) {
  auto bad = [](const char* f, double v, const char* why) {
    return invalid_argument(std::string("optimizer.") + f + " = " + std::to_string(v) + " " + why);
  };
  if (!(c.lr > 0) || !std::isfinite(c.lr)) return bad("lr", c.lr, "must be a positive number");
  if (!(c.beta1 >= 0 && c.beta1 < 1)) return bad("betas[0]", c.beta1, "must be in [0, 1)");
  if (!(c.beta2 >= 0 && c.beta2 < 1)) return bad("betas[1]", c.beta2, "must be in [0, 1)");
  if (!(c.eps > 0) || !std::isfinite(c.eps)) return bad("eps", c.eps, "must be a positive finite number");
  if (!(c.weight_decay >= 0) || !std::isfinite(c.weight_decay))
    return bad("weight_decay", c.weight_decay, "must be a finite number >= 0");
  if (!(c.grad_clip >= 0) || !std::isfinite(c.grad_clip))
    return bad("grad_clip", c.grad_clip, "must be a finite number >= 0 (0: no clipping)");
  return Status::Ok();
}

Result<LrDecay> parse_lr_decay(const std::string& name) {
  if (name == "cosine") return LrDecay::kCosine;
  if (name == "linear") return LrDecay::kLinear;
  if (name == "constant") return LrDecay::kConstant;
  return invalid_argument("schedule.decay = '" + name + "' is not one of cosine, linear, constant");
}

const char* lr_decay_name(LrDecay d) {
  switch (d) {
    case LrDecay::kCosine: return "cosine";
    case LrDecay::kLinear: return "linear";
    case LrDecay::kConstant: return "constant";
  }
  return "?";
}

float LrSchedule::at(float base_lr, long step) const {
  if (step < warmup_steps) return base_lr * float(step + 1) / float(warmup_steps);
  const long span = std::max(1L, total_steps - warmup_steps);
  const double progress = std::min(1.0, double(step - warmup_steps) / double(span));
  double f = 1.0;
  if (decay == LrDecay::kCosine) f = 0.5 * (1 + std::cos(std::numbers::pi * progress));
  if (decay == LrDecay::kLinear) f = 1 - progress;
  return base_lr * float(min_lr_ratio + (1 - min_lr_ratio) * f);
}

float clip_factor(double grad_norm, float grad_clip) {
  if (grad_clip <= 0 || !(grad_norm > grad_clip)) return 1.0f;
  return float(grad_clip / (grad_norm + 1e-6));
}

namespace {

// A unit's tensors cut into pieces of at most kOptimizerPiece elements: the parallel work items.
constexpr size_t kPiece = kOptimizerPiece;
struct Piece {
  size_t offset, n;
  bool decay;
};

std::vector<Piece> pieces(const ParamSchema& u) {
  std::vector<Piece> out;
  for (const auto& t : u.tensors)
    for (size_t o = 0; o < t.numel; o += kPiece) out.push_back({t.offset + o, std::min(kPiece, t.numel - o), t.decay});
  return out;
}

}  // namespace

template <typename S>
double unit_grad_sumsq(ThreadPool& pool, const ParamSchema& u, const S* grad) {
  const auto ps = pieces(u);
  std::vector<double> partial(ps.size());
  pool.parallel_blocks(int(ps.size()), [&](int i) { partial[size_t(i)] = cpu::sum_squares(grad + ps[size_t(i)].offset, ps[size_t(i)].n); });
  double total = 0;
  for (double p : partial) total += p;  // fixed order: deterministic
  return total;
}

namespace {
template <typename S>
void adamw_piece(const UnitState<S>& st, const cpu::AdamWParams& p, size_t o, size_t n, bool decay) {
  cpu::AdamWParams q = p;
  if (!decay) q.weight_decay = 0;
  cpu::adamw_update<S>(st.master + o, st.grad + o, st.m + o, st.v + o, st.shadow ? st.shadow + o : nullptr, n, q);
}
}  // namespace

template <typename S>
void adamw_unit(ThreadPool& pool, const ParamSchema& u, const UnitState<S>& st, const cpu::AdamWParams& p) {
  const auto ps = pieces(u);
  pool.parallel_blocks(int(ps.size()), [&](int i) {
    const Piece& pc = ps[size_t(i)];
    adamw_piece(st, p, pc.offset, pc.n, pc.decay);
  });
}

std::vector<std::pair<size_t, size_t>> update_blocks(const ParamSchema& u, int threads) {
  const auto ps = pieces(u);
  std::vector<std::pair<size_t, size_t>> out(size_t(std::max(threads, 1)), {0, 0});
  const int blocks = std::min(int(ps.size()), int(out.size()));
  for (int b = 0; b < blocks; ++b) {  // the split of ThreadPool::parallel_blocks
    const auto [lo, hi] = ThreadPool::block_range(int(ps.size()), blocks, b);
    out[size_t(b)] = {ps[size_t(lo)].offset, ps[size_t(hi - 1)].offset + ps[size_t(hi - 1)].n};
  }
  return out;
}

template <typename S>
void adamw_range(const ParamSchema& u, const UnitState<S>& st, const cpu::AdamWParams& p, size_t offset, size_t n) {
  bool decay = false;
  for (const auto& t : u.tensors)
    if (offset >= t.offset && offset < t.offset + t.numel) decay = t.decay;
  adamw_piece(st, p, offset, n, decay);
}

template double unit_grad_sumsq(ThreadPool&, const ParamSchema&, const float*);
template double unit_grad_sumsq(ThreadPool&, const ParamSchema&, const bf16*);
template void adamw_unit(ThreadPool&, const ParamSchema&, const UnitState<float>&, const cpu::AdamWParams&);
template void adamw_unit(ThreadPool&, const ParamSchema&, const UnitState<bf16>&, const cpu::AdamWParams&);
template void adamw_range(const ParamSchema&, const UnitState<float>&, const cpu::AdamWParams&, size_t, size_t);
template void adamw_range(const ParamSchema&, const UnitState<bf16>&, const cpu::AdamWParams&, size_t, size_t);

}  // namespace mt

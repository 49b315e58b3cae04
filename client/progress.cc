#include "client/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace mt::cli {

Progress::Progress(bool json) : json_(json), tty_(!json && isatty(STDOUT_FILENO)) {}

void Progress::step(const ProgressEvent& e) {
  const bool moe = e.experts_total > 0;  // its aux_loss may be NaN when the run diverges
  if (json_) {
    Json j = Json::object({{"event", "step"}, {"step", int64_t(e.step)}, {"steps", int64_t(e.steps)},
                           {"loss", e.loss}, {"tokens_per_second", e.tokens_per_second},
                           {"step_seconds", e.step_seconds}, {"h2d_gbps", e.h2d_gbps},
                           {"d2h_gbps", e.d2h_gbps}, {"eta_seconds", e.eta_seconds},
                           {"grad_norm", e.grad_norm}, {"grad_clipped", e.grad_clipped},
                           {"learning_rate", e.learning_rate}});
    if (moe) {
      j.set("aux_loss", e.aux_loss);
      j.set("experts_routed", int64_t(e.experts_routed));
      j.set("experts_total", int64_t(e.experts_total));
    }
    std::printf("%s\n", j.dump().c_str());
  } else {
    char experts[64] = "";
    if (moe) std::snprintf(experts, sizeof experts, "  aux %.4f  experts %ld/%ld", e.aux_loss, e.experts_routed, e.experts_total);
    std::printf("%sstep %ld/%ld  loss %.4f%s  grad %.3g%s  lr %.3g  %.0f tok/s  %.3f s/step  H2D %.2f GB/s  "
                "D2H %.2f GB/s  ETA %.0fs%s",
                tty_ ? "\r\033[K" : "", e.step, e.steps, e.loss, experts, e.grad_norm,
                e.grad_clipped ? " (clipped)" : "", e.learning_rate, e.tokens_per_second, e.step_seconds, e.h2d_gbps,
                e.d2h_gbps, e.eta_seconds, tty_ ? "" : "\n");
    live_ = tty_;
  }
  std::fflush(stdout);
}

void Progress::eval(const EvalEvent& e) {
  if (json_) {
    std::printf("%s\n", Json::object({{"event", "eval"}, {"step", int64_t(e.step)}, {"eval_loss", e.loss},
                                      {"best", e.best}, {"best_eval_step", int64_t(e.best_step)},
                                      {"best_eval_loss", e.best_loss}})
                            .dump()
                            .c_str());
    std::fflush(stdout);
    return;
  }
  char text[160];
  if (e.best) std::snprintf(text, sizeof text, "eval step %ld  held-out loss %.4f  (best)", e.step, e.loss);
  else
    std::snprintf(text, sizeof text, "eval step %ld  held-out loss %.4f  (best %.4f at step %ld)", e.step, e.loss,
                  e.best_loss, e.best_step);
  message(text);
}

void Progress::message(const std::string& text) {
  if (json_) {
    std::fprintf(stderr, "%s\n", text.c_str());
    return;
  }
  std::printf("%s%s\n", live_ ? "\n" : "", text.c_str());
  live_ = false;
  std::fflush(stdout);
}

void Progress::summary(const Json& fields) {
  if (json_) {
    Json j = Json::object({{"event", "summary"}});
    for (const auto& [k, v] : fields.members()) j.set(k, v);
    std::printf("%s\n", j.dump().c_str());
  } else {
    if (live_) std::printf("\n");
    for (const auto& [k, v] : fields.members()) {
      char num[64];
      if (v.is_number() && !v.is_integer()) std::snprintf(num, sizeof num, "%.6g", v.as_double());
      const std::string text = v.is_string() ? v.as_string() : v.is_number() && !v.is_integer() ? num : v.dump();
      std::printf("%-18s %s\n", (k + ":").c_str(), text.c_str());
    }
  }
  live_ = false;
  std::fflush(stdout);
}

ByteProgress::ByteProgress(std::string what, uint64_t total_bytes)
    : what_(std::move(what)), total_(total_bytes), tty_(isatty(STDERR_FILENO)),
      start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

void ByteProgress::update(uint64_t bytes, uint64_t tokens) {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < (tty_ ? std::chrono::milliseconds(100) : std::chrono::milliseconds(5000))) return;
  last_draw_ = now;
  draw(bytes, tokens, false);
}

void ByteProgress::finish(uint64_t bytes, uint64_t tokens) { draw(bytes, tokens, true); }

void ByteProgress::draw(uint64_t bytes, uint64_t tokens, bool last) {
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double frac = total_ ? std::min(1.0, double(bytes) / double(total_)) : 1.0;
  const double tps = secs > 0 ? double(tokens) / secs : 0;
  const double eta = frac > 0 ? secs * (1 - frac) / frac : 0;
  constexpr int kWidth = 24;
  const int filled = int(frac * kWidth);
  std::string bar = std::string(size_t(filled), '#') + std::string(size_t(kWidth - filled), '.');
  std::fprintf(stderr, "%s%s [%s] %3.0f%%  %.1f/%.1f MB  %llu tokens  %.0f tok/s  ETA %.0fs%s", tty_ ? "\r\033[K" : "",
               what_.c_str(), bar.c_str(), 100 * frac, double(bytes) / 1e6, double(total_) / 1e6,
               (unsigned long long)tokens, tps, eta, tty_ && !last ? "" : "\n");
  std::fflush(stderr);
}

}  // namespace mt::cli

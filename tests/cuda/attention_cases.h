// Shared by the CUDA attention tests (attention_mma_test.cc, attention_cudnn_test.cc): the
// shapes, inputs, failure locators, tolerances and the bf16-operand rounding slack (see
// attention_mma_test.cc's header for how the tolerances are derived).
#pragma once
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tests/cuda/cuda_test_util.h"
#include "tests/kernels/attention_mma_emulation.h"

namespace mt::attn_cases {

using cudatest::Bf;
using cudatest::rnd;

inline constexpr double kOut = 1.0 / 128, kGrad = 1.0 / 64, kLse = 1e-5;

struct Case {
  int B, T, H, KVH, D;
  bool docs;
  std::string str() const {
    char s[96];
    std::snprintf(s, sizeof s, "B=%d T=%d H=%d KVH=%d D=%d %s", B, T, H, KVH, D, docs ? "documents" : "one sequence");
    return s;
  }
  size_t rows() const { return size_t(B) * T; }
  size_t nqkv() const { return rows() * (H + 2 * KVH) * D; }
  size_t nout() const { return rows() * H * D; }
  size_t nlse() const { return size_t(B) * H * T; }
};

// Positions of documents of random lengths 1..90 per row, the first of length 1, and a document
// of length 1 at the last token; empty without documents (nullptr: one document per row).
inline std::vector<int32_t> positions(const Case& c) {
  if (!c.docs) return {};
  std::mt19937 rng(uint32_t(c.T * 31 + c.D));
  std::vector<int32_t> pos;
  for (int b = 0; b < c.B; ++b) {
    int p = 0, left = 1;
    for (int t = 0; t < c.T; ++t) {
      if (left == 0 || t == c.T - 1) p = 0, left = 1 + int(rng() % 90u);
      pos.push_back(p++);
      --left;
    }
  }
  return pos;
}

// Locators for failure messages: element i of out [B, T, H, D], lse [B, H, T], dqkv [B, T, (H + 2 KVH) D].
inline std::function<std::string(size_t)> at_out(const Case& c) {
  return [c](size_t i) {
    const size_t row = i / (size_t(c.H) * c.D), col = i % (size_t(c.H) * c.D);
    return "b=" + std::to_string(row / c.T) + " t=" + std::to_string(row % c.T) + " h=" + std::to_string(col / c.D) +
           " d=" + std::to_string(col % c.D);
  };
}
inline std::function<std::string(size_t)> at_lse(const Case& c) {
  return [c](size_t i) {
    return "b=" + std::to_string(i / (size_t(c.H) * c.T)) + " h=" + std::to_string(i / c.T % c.H) +
           " t=" + std::to_string(i % c.T);
  };
}
inline std::function<std::string(size_t)> at_qkv(const Case& c) {
  return [c](size_t i) {
    const size_t width = size_t(c.H + 2 * c.KVH) * c.D, row = i / width, head = i % width / c.D;
    const std::string which = head < size_t(c.H)           ? "dq h=" + std::to_string(head)
                              : head < size_t(c.H + c.KVH) ? "dk kvh=" + std::to_string(head - c.H)
                                                           : "dv kvh=" + std::to_string(head - c.H - c.KVH);
    return "b=" + std::to_string(row / c.T) + " t=" + std::to_string(row % c.T) + " " + which +
           " d=" + std::to_string(i % c.D);
  };
}

struct Inputs {
  Bf qkv, dout;
  std::vector<int32_t> pos;
  explicit Inputs(const Case& c) : qkv(rnd(c.nqkv(), 1, -2, 2)), dout(rnd(c.nout(), 2)), pos(positions(c)) {}
  const int32_t* p() const { return pos.empty() ? nullptr : pos.data(); }
};

inline std::vector<float> widen(const Bf& x) { return {x.d.begin(), x.d.end()}; }

// u * sum|terms| of every output (see the header), from the emulation on these inputs; the
// backward's bound on the output and lse the GPU forward stored (`fwd_out`, `fwd_lse`).
struct Slack {
  std::vector<double> out, dqkv;
};
inline Slack rounding_slack(const Case& c, const Inputs& in, const std::vector<float>& fwd_out,
                     const std::vector<float>& fwd_lse) {
  const attn_emulation::Problem pr{c.B, c.T, c.H, c.KVH, c.D, in.p()};
  const auto qkv = widen(in.qkv);
  const auto f = attn_emulation::forward(pr, qkv);
  const auto b = attn_emulation::backward(pr, qkv, widen(in.dout), fwd_out, fwd_lse);
  Slack s;
  for (float x : f.bound) s.out.push_back(attn_emulation::kRoundoff * x);
  for (float x : b.bound) s.dqkv.push_back(attn_emulation::kRoundoff * x);
  return s;
}

struct Outputs {
  std::vector<float> out, lse, dqkv;
  std::vector<double> out_d() const { return {out.begin(), out.end()}; }
  std::vector<double> lse_d() const { return {lse.begin(), lse.end()}; }
};

}  // namespace mt::attn_cases

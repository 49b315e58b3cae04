// The op table test's rows (ggml's test-backend-ops in miniature; STYLE.md section 4): one row
// per Ops<T> method and variant, each building random inputs at odd shapes; the harness that
// runs and checks them, with each tensor's role and the tolerances, is op_harness.h.
// tests/engine/backend/ops_table_test.cc runs the rows on the CPU tables (bare, and behind
// CpuBackend), tests/cuda/ops_table_test.cc on CudaBackend's; OpsTable.EveryOpHasARow checks
// that the rows name kOpCount (engine/backend/ops.h) distinct methods.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "tests/engine/backend/op_harness.h"

namespace mt::optest {

// ---- the rows ---------------------------------------------------------------------------------

// Odd shapes, nothing dividing anything: N tokens of width C, OC outputs, F gate width, V
// vocabulary (LM head; kEmbV for the embedding, small so tokens repeat), chunk 4 of 13 tokens.
// Attention and RoPE: B rows of T = 37 tokens (past the CUDA kernels' 32-key tiles), 6 query
// heads on 2 KV heads (GQA), head_dim 10 — neither a multiple of 8 (cuDNN) nor 64/128 (the
// tensor-core kernel), so every CUDA table runs the SIMT kernel, whatever MEGATRAIN_ATTENTION
// says; those kernels have their own tests (attention_cudnn_test.cc, attention_mma_test.cc).
inline constexpr int kN = 13, kC = 33, kOC = 19, kF = 19, kV = 37, kEmbV = 7, kChunk = 4;
inline constexpr int kB = 2, kT = 37, kH = 6, kKVH = 2, kD = 10;
inline constexpr size_t kQkv = size_t(kB) * kT * (kH + 2 * kKVH) * kD, kAttnOut = size_t(kB) * kT * kH * kD;
inline constexpr size_t kLse = size_t(kB) * kH * kT, kFlat = 1001;
// Mixture of experts: kMoeN tokens, each routed to kMoeK of kMoeE experts (kMoeN * kMoeK = 111
// slots), rows of width kC.
inline constexpr int kMoeN = 37, kMoeE = 7, kMoeK = 3;
inline constexpr size_t kSlots = size_t(kMoeN) * kMoeK;

// Packed documents (kernels/attention.h): row 0 holds documents of 20, 1 and 16 tokens, row 1 of
// 36 and 1 (a boundary at the last token).
inline std::vector<int32_t> document_positions() {
  std::vector<int32_t> pos;
  for (const auto& row : {std::vector<int>{20, 1, 16}, std::vector<int>{36, 1}})
    for (int len : row)
      for (int i = 0; i < len; ++i) pos.push_back(i);
  return pos;
}

inline std::vector<double> doubles(const std::vector<int32_t>& v) { return {v.begin(), v.end()}; }

// Attention's documents as the executor passes them: positions (device) and spans (host starts,
// and the same starts on the device), or one document per row.
struct AttentionVariant {
  const char* name;
  bool documents;
  AttentionOptions opt;
};
struct AttentionInputs {
  std::vector<int32_t> pos, starts;
  int pos_i = kNone, starts_i = kNone;
  AttentionInputs(Case& c, bool documents) {
    if (!documents) return;
    pos = document_positions();
    starts = document_starts(pos.data(), kB, kT);
    pos_i = c.in("pos", Kind::kI32, doubles(pos));
    starts_i = c.in("document starts", Kind::kI32, doubles(starts));
  }
  const int32_t* host_pos() const { return pos.empty() ? nullptr : pos.data(); }
  // The documents of a call on p's memory; `spans` must outlive the call.
  template <typename P>
  Documents docs(const P& p, DocumentSpans& spans) const {
    if (pos_i == kNone) return Documents();
    spans = {starts.data(), p.i32(starts_i), int(starts.size()) - 1};
    return Documents(p.i32(pos_i), &spans);
  }
};

inline std::vector<double> inv_freq(int D) {
  std::vector<double> f(size_t(D / 2));
  for (int i = 0; i < D / 2; ++i) f[size_t(i)] = double(float(std::pow(10000.0, -2.0 * i / D)));
  return f;
}

// A random permutation of 0 .. n-1 (from the case's seeded data).
inline std::vector<int> permutation(Case& c, size_t n) {
  const std::vector<double> key = c.random(n);
  std::vector<int> p(n);
  std::iota(p.begin(), p.end(), 0);
  std::sort(p.begin(), p.end(), [&](int a, int b) { return key[size_t(a)] < key[size_t(b)]; });
  return p;
}

// Router logits [N, E] with no near ties: each token's logits are a permutation of -1.5, -1,
// -0.5, ... plus noise under 0.1, so any two differ by 0.3 or more — far beyond bf16 rounding
// of the logits (2^-8 relative) and any fp32 softmax error: every table picks the same top k.
inline std::vector<double> router_logits(Case& c, int N, int E) {
  std::vector<double> l(size_t(N) * E);
  const std::vector<double> noise = c.random(l.size(), -0.1, 0.1);
  for (int t = 0; t < N; ++t) {
    const std::vector<int> order = permutation(c, size_t(E));
    for (int e = 0; e < E; ++e) l[size_t(t) * E + e] = -1.5 + 0.5 * order[size_t(e)] + noise[size_t(t) * E + e];
  }
  return l;
}

// idx [N, k]: each token's k distinct experts, drawn from `experts` in random order.
inline std::vector<double> routed_experts(Case& c, int N, int k, const std::vector<int>& experts) {
  std::vector<double> idx;
  for (int t = 0; t < N; ++t) {
    const std::vector<int> order = permutation(c, experts.size());
    for (int j = 0; j < k; ++j) idx.push_back(experts[size_t(order[size_t(j)])]);
  }
  return idx;
}

// The slots of the expert with the most tokens (rows[offsets[e] .. offsets[e + 1])), as the
// reference sort orders them: what one expert's gather / scatter call gets. Distinct tokens.
inline std::vector<double> busiest_expert_rows(const std::vector<double>& idx, int N, int E, int k) {
  std::vector<int32_t> id(idx.begin(), idx.end()), rows(idx.size()), off(size_t(E) + 1);
  cpu_ops<double>().moe_sort(rows.data(), off.data(), id.data(), N, E, k);
  int best = 0;
  for (int e = 1; e < E; ++e)
    if (off[size_t(e) + 1] - off[size_t(e)] > off[size_t(best) + 1] - off[size_t(best)]) best = e;
  return {rows.begin() + off[size_t(best)], rows.begin() + off[size_t(best) + 1]};
}

inline std::vector<Row> make_op_rows() {
  std::vector<Row> r;
  auto add = [&r](const char* op, const char* variant, std::function<Case()> build) {
    r.push_back({op, variant, std::move(build)});
  };
  // out[N, OC] = inp[N, C] @ w[OC, C]^T (+ bias), and the backward into any of its three outputs.
  for (const bool bias : {true, false}) {
    add(MT_OP(matmul_forward), bias ? "bias" : "no bias", [=] {
      Case c;
      const int x = c.in("inp", Kind::kT, c.random(kN * kC)), w = c.in("w", Kind::kT, c.random(kOC * kC));
      const int b = bias ? c.in("bias", Kind::kT, c.random(kOC)) : kNone, out = c.out("out", Kind::kT, kN * kOC);
      c.run([=](const auto& ops, const auto& p) { ops.matmul_forward(p.t(out), p.t(x), p.t(w), p.t(b), kN, kC, kOC); });
      return c;
    });
    add(MT_OP(matmul_backward), bias ? "dinp, dweight, dbias" : "dweight only", [=] {
      Case c;
      const int x = c.in("inp", Kind::kT, c.random(kN * kC)), w = c.in("w", Kind::kT, c.random(kOC * kC));
      const int dout = c.in("dout", Kind::kT, c.random(kN * kOC)), dw = c.acc("dweight", Kind::kA, kOC * kC);
      const int dinp = bias ? c.acc("dinp", Kind::kT, kN * kC) : kNone;
      const int db = bias ? c.acc("dbias", Kind::kA, kOC) : kNone;
      c.run([=](const auto& ops, const auto& p) {
        ops.matmul_backward(p.t(dinp), p.a(dw), p.a(db), p.t(dout), p.t(x), p.t(w), kN, kC, kOC);
      });
      return c;
    });
  }
  // RMSNorm with Llama's scale w (offset 0) and Gemma's 1 + w (offset 1); the backward reads the
  // forward's rstd (computed here in double).
  for (const float offset : {0.f, 1.f}) {
    const char* variant = offset == 0 ? "scale w" : "scale 1 + w";
    const double w_lo = offset == 0 ? 0.5 : -0.5;
    add(MT_OP(rmsnorm_forward), variant, [=] {
      Case c;
      const int x = c.in("inp", Kind::kT, c.random(kN * kC, -2, 2));
      const int w = c.in("w", Kind::kT, c.random(kC, w_lo, w_lo + 1));
      const int out = c.out("out", Kind::kT, kN * kC), rstd = c.out("rstd", Kind::kA, kN);
      c.run([=](const auto& ops, const auto& p) {
        ops.rmsnorm_forward(p.t(out), p.a(rstd), p.t(x), p.t(w), kN, kC, 1e-5f, offset);
      });
      return c;
    });
    add(MT_OP(rmsnorm_backward), variant, [=] {
      Case c;
      const auto xv = c.random(kN * kC, -2, 2), wv = c.random(kC, w_lo, w_lo + 1);
      std::vector<double> o(xv.size()), rs(kN);
      cpu_ops<double>().rmsnorm_forward(o.data(), rs.data(), xv.data(), wv.data(), kN, kC, 1e-5f, offset);
      const int x = c.in("inp", Kind::kT, xv), w = c.in("w", Kind::kT, wv), rstd = c.in("rstd", Kind::kA, rs);
      const int dout = c.in("dout", Kind::kT, c.random(kN * kC));
      const int dinp = c.acc("dinp", Kind::kT, kN * kC), dw = c.acc("dweight", Kind::kA, kC);
      c.run([=](const auto& ops, const auto& p) {
        ops.rmsnorm_backward(p.t(dinp), p.a(dw), p.t(dout), p.t(x), p.t(w), p.a(rstd), kN, kC, offset);
      });
      return c;
    });
  }
  // Q/K norms per head (Qwen3; Gemma 3's with 1 + w) and over the whole projections (OLMo 2).
  for (const bool per_head : {true, false}) {
    const char* variant = per_head ? "per head, scale 1 + w" : "whole projections, scale w";
    const float offset = per_head ? 1.f : 0.f;
    const QkNormShape s{kN, kH, kKVH, kD, per_head};
    const size_t n = size_t(kN) * size_t(s.row()), nq = size_t(s.q_width()), nk = size_t(s.k_width());
    const size_t nrstd = size_t(kN) * size_t(s.vectors());
    add(MT_OP(qk_norm_forward), variant, [=] {
      Case c;
      const int raw = c.in("raw", Kind::kT, c.random(n, -2, 2));
      const int wq = c.in("wq", Kind::kT, c.random(nq, offset - 0.5, offset + 0.5));
      const int wk = c.in("wk", Kind::kT, c.random(nk, offset - 0.5, offset + 0.5));
      const int qkv = c.out("qkv", Kind::kT, n), rstd = c.out("rstd", Kind::kA, nrstd);
      c.run([=](const auto& ops, const auto& p) {
        ops.qk_norm_forward(p.t(qkv), p.a(rstd), p.t(raw), p.t(wq), p.t(wk), s, 1e-6f, offset);
      });
      return c;
    });
    add(MT_OP(qk_norm_backward), variant, [=] {
      Case c;
      const auto rv = c.random(n, -2, 2), wqv = c.random(nq, offset - 0.5, offset + 0.5),
                 wkv = c.random(nk, offset - 0.5, offset + 0.5);
      std::vector<double> o(n), rs(nrstd);
      cpu_ops<double>().qk_norm_forward(o.data(), rs.data(), rv.data(), wqv.data(), wkv.data(), s, 1e-6f, offset);
      const int raw = c.in("raw", Kind::kT, rv), wq = c.in("wq", Kind::kT, wqv), wk = c.in("wk", Kind::kT, wkv);
      const int rstd = c.in("rstd", Kind::kA, rs), dqkv = c.in("dqkv", Kind::kT, c.random(n));
      const int draw = c.out("draw", Kind::kT, n), dwq = c.acc("dwq", Kind::kA, nq), dwk = c.acc("dwk", Kind::kA, nk);
      c.run([=](const auto& ops, const auto& p) {
        ops.qk_norm_backward(p.t(draw), p.a(dwq), p.a(dwk), p.t(dqkv), p.t(raw), p.t(wq), p.t(wk), p.a(rstd), s,
                             offset);
      });
      return c;
    });
  }
  // RoPE in place: each row one sequence, or packed documents with YaRN's scale on cos and sin.
  for (const bool documents : {false, true}) {
    const char* variant = documents ? "documents, YaRN scale" : "one sequence per row";
    const float scale = documents ? 1.1386294f : 1.f;
    for (const bool forward : {true, false})
      add(forward ? MT_OP(rope_forward) : MT_OP(rope_backward), variant, [=] {
        Case c;
        const int f = c.in("inv_freq", Kind::kF32, inv_freq(kD));
        const int pos = documents ? c.in("pos", Kind::kI32, doubles(document_positions())) : kNone;
        const int qkv = c.inout("qkv", Kind::kT, c.random(kQkv, -3, 3));
        c.run([=](const auto& ops, const auto& p) {
          if (forward) ops.rope_forward(p.t(qkv), p.f32(f), p.i32(pos), kB, kT, kH, kKVH, kD, scale);
          else ops.rope_backward(p.t(qkv), p.f32(f), p.i32(pos), kB, kT, kH, kKVH, kD, scale);
        });
        return c;
      });
  }
  // Causal GQA attention: plain; packed documents with a sliding window; and with Gemma 2's score
  // scale and soft cap as well (a cap of 1.5 that bends scores of up to ~2). The backward reads
  // the forward's out and lse (computed here in double).
  for (const AttentionVariant v : {AttentionVariant{"causal", false, {}},
                                   AttentionVariant{"documents, sliding window", true, {5, 0, 0}},
                                   AttentionVariant{"documents, window, scale, soft cap", true, {9, 0.3, 1.5}}}) {
    add(MT_OP(attention_forward), v.name, [=] {
      Case c;
      const AttentionInputs packed(c, v.documents);
      const int qkv = c.in("qkv", Kind::kT, c.random(kQkv, -2, 2));
      const int out = c.out("out", Kind::kT, kAttnOut), lse = c.out("lse", Kind::kA, kLse);
      c.run([=](const auto& ops, const auto& p) {
        DocumentSpans spans;
        ops.attention_forward(p.t(out), p.a(lse), p.t(qkv), packed.docs(p, spans), v.opt, kB, kT, kH, kKVH, kD);
      });
      return c;
    });
    add(MT_OP(attention_backward), v.name, [=] {
      Case c;
      const AttentionInputs packed(c, v.documents);
      const auto qv = c.random(kQkv, -2, 2);
      std::vector<double> o(kAttnOut), l(kLse);
      cpu_ops<double>().attention_forward(o.data(), l.data(), qv.data(), packed.host_pos(), v.opt, kB, kT, kH, kKVH,
                                          kD);
      const int qkv = c.in("qkv", Kind::kT, qv), out = c.in("out", Kind::kT, o), lse = c.in("lse", Kind::kA, l);
      const int dout = c.in("dout", Kind::kT, c.random(kAttnOut)), dqkv = c.out("dqkv", Kind::kT, kQkv);
      c.run([=](const auto& ops, const auto& p) {
        DocumentSpans spans;
        ops.attention_backward(p.t(dqkv), p.t(dout), p.t(qkv), p.t(out), p.a(lse), packed.docs(p, spans), v.opt, kB, kT,
                               kH, kKVH, kD);
      });
      return c;
    });
  }
  // gpt-oss's attention sinks, folded into attention's out and lse (random, lse spread over
  // [-1, 3] against sinks in [-2, 2], so the fold moves some rows a little and some a lot); the
  // backward reads a folded out and lse (computed here in double) and sums over 74 query rows.
  add(MT_OP(attention_sinks_forward), "fold into out and lse", [] {
    Case c;
    const int sinks = c.in("sinks", Kind::kT, c.random(kH, -2, 2));
    const int out = c.inout("out", Kind::kT, c.random(kAttnOut)), lse = c.inout("lse", Kind::kA, c.random(kLse, -1, 3));
    c.run([=](const auto& ops, const auto& p) {
      ops.attention_sinks_forward(p.t(out), p.a(lse), p.t(sinks), kB, kT, kH, kD);
    });
    return c;
  });
  add(MT_OP(attention_sinks_backward), "dsinks +=", [] {
    Case c;
    const auto sv = c.random(kH, -2, 2);
    auto ov = c.random(kAttnOut), lv = c.random(kLse, -1, 3);
    cpu_ops<double>().attention_sinks_forward(ov.data(), lv.data(), sv.data(), kB, kT, kH, kD);
    const int sinks = c.in("sinks", Kind::kT, sv), out = c.in("out", Kind::kT, ov), lse = c.in("lse", Kind::kA, lv);
    const int dout = c.in("dout", Kind::kT, c.random(kAttnOut)), dsinks = c.acc("dsinks", Kind::kA, kH);
    c.run([=](const auto& ops, const auto& p) {
      ops.attention_sinks_backward(p.a(dsinks), p.t(dout), p.t(out), p.a(lse), p.t(sinks), kB, kT, kH, kD);
    });
    return c;
  });
  // Gated MLP activations on gates well into both tails: SiLU (SwiGLU), GELU-tanh (GeGLU), and
  // gpt-oss's clamped SwiGLU with a limit of 2.9 that clamps about a quarter of the gates and ups
  // (2.9 is no bf16 value, so no input sits on the clamp's kink).
  struct GateVariant {
    const char* name;
    Activation act;
  };
  for (const GateVariant g : {GateVariant{"SiLU", GateActivation::kSilu},
                              GateVariant{"GELU tanh", GateActivation::kGeluTanh},
                              GateVariant{"clamped SwiGLU", {GateActivation::kClampedSwiglu, 1.702f, 2.9f}}}) {
    const char* variant = g.name;
    const Activation act = g.act;
    const size_t n = size_t(kN) * kF;
    add(MT_OP(swiglu_forward), variant, [=] {
      Case c;
      const int gu = c.in("gu", Kind::kT, c.random(2 * n, -4, 4)), out = c.out("out", Kind::kT, n);
      c.run([=](const auto& ops, const auto& p) { ops.swiglu_forward(p.t(out), p.t(gu), kN, kF, act); });
      return c;
    });
    add(MT_OP(swiglu_backward), variant, [=] {
      Case c;
      const int gu = c.in("gu", Kind::kT, c.random(2 * n, -4, 4)), dout = c.in("dout", Kind::kT, c.random(n));
      const int dgu = c.out("dgu", Kind::kT, 2 * n);
      c.run([=](const auto& ops, const auto& p) { ops.swiglu_backward(p.t(dgu), p.t(dout), p.t(gu), kN, kF, act); });
      return c;
    });
  }
  // The MoE router: softmax then top k (Qwen2-MoE, Qwen3-MoE without norm_topk_prob) keeping the
  // load-balancing statistics (+=), renormalised (Mixtral) without them, and top k then softmax
  // (gpt-oss). Its backward reads the forward's choice (computed here in double), with the
  // load-balancing gradient (counts: the forward's) or without.
  struct RouterVariant {
    const char* name;           // the forward's row
    const char* backward_name;  // the backward's
    RouterKind kind;
    bool renormalize, stats;  // stats: the forward keeps them, the backward adds the load balancing
  };
  for (const RouterVariant v : {RouterVariant{"softmax, top k, statistics", "softmax, top k, load balancing",
                                              RouterKind::kSoftmaxTopK, false, true},
                                RouterVariant{"softmax, top k, renormalised", "softmax, top k, renormalised",
                                              RouterKind::kSoftmaxTopK, true, false},
                                RouterVariant{"top k, softmax, statistics", "top k, softmax, load balancing",
                                              RouterKind::kTopKSoftmax, false, true}}) {
    RouterShape s;
    s.N = kMoeN, s.E = kMoeE, s.k = kMoeK, s.kind = v.kind, s.renormalize = v.renormalize;
    add(MT_OP(moe_route_forward), v.name, [=] {
      Case c;
      const int logits = c.in("logits", Kind::kT, router_logits(c, kMoeN, kMoeE));
      const int idx = c.out("idx", Kind::kI32, kSlots), w = c.out("w", Kind::kA, kSlots);
      const int stats = v.stats ? c.acc("stats", Kind::kA, 2 * kMoeE) : kNone;
      c[idx].exact = true;
      c.run([=](const auto& ops, const auto& p) {
        ops.moe_route_forward(p.i32(idx), p.a(w), p.a(stats), p.t(logits), s);
      });
      return c;
    });
    add(MT_OP(moe_route_backward), v.backward_name, [=] {
      Case c;
      const auto lv = router_logits(c, kMoeN, kMoeE);
      std::vector<int32_t> iv(kSlots);
      std::vector<double> wv(kSlots), st(2 * kMoeE, 0.0);
      cpu_ops<double>().moe_route_forward(iv.data(), wv.data(), st.data(), lv.data(), s);
      const int logits = c.in("logits", Kind::kT, lv), idx = c.in("idx", Kind::kI32, doubles(iv));
      const int w = c.in("w", Kind::kA, wv), dw = c.in("dw", Kind::kA, c.random(kSlots));
      const int counts = v.stats ? c.in("counts", Kind::kA, {st.begin(), st.begin() + kMoeE}) : kNone;
      const int dlogits = c.out("dlogits", Kind::kT, size_t(kMoeN) * kMoeE);
      c.run([=](const auto& ops, const auto& p) {
        ops.moe_route_backward(p.t(dlogits), p.a(dw), p.t(logits), p.i32(idx), p.a(w), p.a(counts), 0.0123f, s);
      });
      return c;
    });
  }
  // The permutation of slots to experts: every expert routed to, and 9 experts of which 0, 4
  // and 8 get no token (empty ranges first, inside and last).
  for (const bool gaps : {false, true}) {
    const int E = gaps ? 9 : kMoeE;
    add(MT_OP(moe_sort), gaps ? "unrouted experts" : "every expert routed", [=] {
      Case c;
      const std::vector<int> experts =
          gaps ? std::vector<int>{1, 2, 3, 5, 6, 7} : std::vector<int>{0, 1, 2, 3, 4, 5, 6};
      const int idx = c.in("idx", Kind::kI32, routed_experts(c, kMoeN, kMoeK, experts));
      const int rows = c.out("rows", Kind::kI32, kSlots), offsets = c.out("offsets", Kind::kI32, size_t(E) + 1);
      c[rows].exact = c[offsets].exact = true;
      c.run([=](const auto& ops, const auto& p) {
        ops.moe_sort(p.i32(rows), p.i32(offsets), p.i32(idx), kMoeN, E, kMoeK);
      });
      return c;
    });
  }
  // Gather (an exact copy) of every slot in expert order; the weighted and unweighted scatter of
  // one expert's slots onto the tokens (+=) and the weighted scatter's backward behind the down
  // projection, whose dw is written at that expert's slots only.
  add(MT_OP(moe_gather), "every slot, by expert", [] {
    Case c;
    const auto iv = routed_experts(c, kMoeN, kMoeK, {0, 1, 2, 3, 4, 5, 6});
    std::vector<int32_t> id(iv.begin(), iv.end()), rv(kSlots), off(kMoeE + 1);
    cpu_ops<double>().moe_sort(rv.data(), off.data(), id.data(), kMoeN, kMoeE, kMoeK);
    const int x = c.in("x", Kind::kT, c.random(size_t(kMoeN) * kC)), rows = c.in("rows", Kind::kI32, doubles(rv));
    const int out = c.out("out", Kind::kT, kSlots * kC);
    c[out].exact = true;
    c.run([=](const auto& ops, const auto& p) {
      ops.moe_gather(p.t(out), p.t(x), p.i32(rows), int(kSlots), kC, kMoeK);
    });
    return c;
  });
  for (const bool weighted : {true, false}) {
    add(MT_OP(moe_scatter), weighted ? "weighted, one expert" : "unweighted, one expert", [=] {
      Case c;
      const auto rv = busiest_expert_rows(routed_experts(c, kMoeN, kMoeK, {0, 1, 2, 3, 4, 5, 6}), kMoeN, kMoeE, kMoeK);
      const int n = int(rv.size());
      const int rows = c.in("rows", Kind::kI32, rv), y = c.in("y", Kind::kT, c.random(size_t(n) * kC));
      const int w = weighted ? c.in("w", Kind::kA, c.random(kSlots, 0, 1)) : kNone;
      const int out = c.acc("out", Kind::kT, size_t(kMoeN) * kC);
      c.run([=](const auto& ops, const auto& p) {
        ops.moe_scatter(p.t(out), p.t(y), p.i32(rows), p.a(w), n, kC, kMoeK);
      });
      return c;
    });
  }
  for (const bool bias : {true, false}) {
    add(MT_OP(moe_weight_backward), bias ? "one expert, with a bias" : "one expert", [=] {
      Case c;
      const auto rv = busiest_expert_rows(routed_experts(c, kMoeN, kMoeK, {0, 1, 2, 3, 4, 5, 6}), kMoeN, kMoeE, kMoeK);
      const int n = int(rv.size());
      const int rows = c.in("rows", Kind::kI32, rv), h = c.in("h", Kind::kT, c.random(size_t(n) * kF));
      const int b = bias ? c.in("b", Kind::kT, c.random(kC)) : kNone;
      const int w = c.in("w", Kind::kA, c.random(kSlots, 0, 1));
      const int dh = c.inout("dh", Kind::kT, c.random(size_t(n) * kF));
      const int dy = c.inout("dy", Kind::kT, c.random(size_t(n) * kC));
      const int dw = c.out("dw", Kind::kA, kSlots, kSlots - size_t(n));
      c.run([=](const auto& ops, const auto& p) {
        ops.moe_weight_backward(p.a(dw), p.t(dh), p.t(dy), p.t(h), p.t(b), p.i32(rows), p.a(w), n, kF, kC);
      });
      return c;
    });
  }
  // Qwen2-MoE's shared-expert gate, on gates well into both tails.
  add(MT_OP(sigmoid_gate_forward), "out +=", [] {
    Case c;
    const int y = c.in("y", Kind::kT, c.random(size_t(kMoeN) * kC)), g = c.in("g", Kind::kT, c.random(kMoeN, -4, 4));
    const int out = c.acc("out", Kind::kT, size_t(kMoeN) * kC);
    c.run([=](const auto& ops, const auto& p) { ops.sigmoid_gate_forward(p.t(out), p.t(y), p.t(g), kMoeN, kC); });
    return c;
  });
  add(MT_OP(sigmoid_gate_backward), "dy, dg", [] {
    Case c;
    const int y = c.in("y", Kind::kT, c.random(size_t(kMoeN) * kC)), g = c.in("g", Kind::kT, c.random(kMoeN, -4, 4));
    const int dout = c.in("dout", Kind::kT, c.random(size_t(kMoeN) * kC));
    const int dy = c.out("dy", Kind::kT, size_t(kMoeN) * kC), dg = c.out("dg", Kind::kT, kMoeN);
    c.run([=](const auto& ops, const auto& p) {
      ops.sigmoid_gate_backward(p.t(dy), p.t(dg), p.t(dout), p.t(y), p.t(g), kMoeN, kC);
    });
    return c;
  });
  // The embedding lookup (an exact row copy) and its backward, tokens repeating (rows accumulate).
  add(MT_OP(embedding_forward), "repeated tokens", [] {
    Case c;
    const int tok = c.in("tokens", Kind::kI32, c.integers(kN, 0, kEmbV - 1));
    const int wte = c.in("wte", Kind::kT, c.random(kEmbV * kC)), out = c.out("out", Kind::kT, kN * kC);
    c[out].exact = true;
    c.run([=](const auto& ops, const auto& p) { ops.embedding_forward(p.t(out), p.i32(tok), p.t(wte), kN, kC); });
    return c;
  });
  add(MT_OP(embedding_backward), "repeated tokens", [] {
    Case c;
    const int tok = c.in("tokens", Kind::kI32, c.integers(kN, 0, kEmbV - 1));
    const int dout = c.in("dout", Kind::kT, c.random(kN * kC)), dwte = c.acc("dwte", Kind::kA, kEmbV * kC);
    c.run([=](const auto& ops, const auto& p) { ops.embedding_backward(p.a(dwte), p.t(dout), p.i32(tok), kN, kC); });
    return c;
  });
  // The fused LM head, every fourth target ignored, chunks of 4 over 13 tokens: plain; with Gemma
  // 2's final soft cap (2, where the logits reach ~3); forward only (evaluation: the totals).
  // In bf16, d(logits) is rounded to bf16 before the dx and dW GEMMs: each term of their sums
  // (over 37 logits, over 10 counted tokens) moves by up to 2^-8 of itself, and the terms'
  // magnitudes add up to a few times the sum's scale where they cancel: 2^-6 of (|inc| + scale)
  // (the CPU bf16 table's worst is a third of that at these shapes).
  struct HeadVariant {
    const char* name;
    float softcap;
    bool backward;
  };
  for (const HeadVariant v : {HeadVariant{"ignored targets", 0.f, true}, HeadVariant{"final soft cap", 2.f, true},
                              HeadVariant{"forward only, soft cap", 2.f, false}}) {
    add(MT_OP(lm_head_loss), v.name, [=] {
      Case c;
      const int x = c.in("x", Kind::kT, c.random(kN * kC, -2, 2));
      const int W = c.in("W", Kind::kT, c.random(kV * kC, -0.5, 0.5));
      std::vector<double> tv = c.integers(kN, 0, kV - 1);
      for (size_t i = 1; i < tv.size(); i += 4) tv[i] = -1;
      const int targets = c.in("targets", Kind::kI32, tv);
      const int dx = v.backward ? c.out("dx", Kind::kT, kN * kC) : kNone;
      const int dW = v.backward ? c.acc("dW", Kind::kA, kV * kC) : kNone;
      const int losses = v.backward ? c.out("losses", Kind::kA, kN) : kNone;
      const int totals = c.out("totals", Kind::kF64, 2), scratch = c.scratch(size_t(kChunk) * kV);
      if (v.backward) c[dx].bf16_slack = c[dW].bf16_slack = 1.0 / 64;
      c.run([=](const auto& ops, const auto& p) {
        ops.lm_head_loss(p.t(dx), p.a(dW), p.a(losses), p.t(x), p.t(W), p.i32(targets), kN, kC, kV, kChunk, 1.0f / 11,
                         v.softcap, p.scratch(scratch), p.f64(totals));
      });
      return c;
    });
  }
  // Elementwise and memory ops on 1001 elements; copy and zero stop short of the end, which must
  // stay as it was.
  add(MT_OP(add_inplace), "y += x", [] {
    Case c;
    const int x = c.in("x", Kind::kT, c.random(kFlat)), y = c.acc("y", Kind::kT, kFlat);
    c.run([=](const auto& ops, const auto& p) { ops.add_inplace(p.t(y), p.t(x), kFlat); });
    return c;
  });
  add(MT_OP(scale_inplace), "Gemma's embedding scale", [] {
    Case c;
    const int y = c.inout("y", Kind::kT, c.random(kFlat, -3, 3));
    c.run([=](const auto& ops, const auto& p) { ops.scale_inplace(p.t(y), 33.941125f, kFlat); });
    return c;
  });
  add(MT_OP(copy_bytes), "all but the last 3", [] {
    Case c;
    const int src = c.in("src", Kind::kT, c.random(kFlat)), dst = c.out("dst", Kind::kT, kFlat, 3);
    c[dst].exact = true;
    c.run([=](const auto& ops, const auto& p) { ops.copy_bytes(p.t(dst), p.t(src), (kFlat - 3) * sizeof(*p.t(dst))); });
    return c;
  });
  add(MT_OP(zero_bytes), "all but the last 2", [] {
    Case c;
    const int y = c.inout("y", Kind::kT, c.random(kFlat));
    c[y].exact = true;
    c.run([=](const auto& ops, const auto& p) { ops.zero_bytes(p.t(y), (kFlat - 2) * sizeof(*p.t(y))); });
    return c;
  });
  return r;
}

inline const std::vector<Row>& op_rows() {
  static const std::vector<Row> rows = make_op_rows();
  return rows;
}

// Row i's test name: its op and variant, each run of other characters one '_'
// ("rmsnorm_forward_scale_1_w").
inline std::string row_name(const ::testing::TestParamInfo<size_t>& info) {
  const Row& row = op_rows()[info.param];
  std::string s;
  for (const char ch : std::string(row.op) + " " + row.variant) {
    if (std::isalnum(static_cast<unsigned char>(ch))) s += ch;
    else if (s.back() != '_') s += '_';
  }
  return s;
}

}  // namespace mt::optest

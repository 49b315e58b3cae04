// Packed documents through the CPU op tables (cpu_ops<T>: the kernels/cpu reference for float and
// double, the widen-compute-round table for bf16): attention and RoPE over a row holding several
// documents equal the same ops run on each document alone, as its own sequence.
//
// The rows hold documents of lengths {70, 1, 60, 18, 1} (a document of length 1 in the middle and
// one at the last token, i.e. a boundary at the last token; 70 and 60 cross the 64-token tiles)
// and {150} (one document, positions 0..149, next to the packed row in one call).
//
// Tolerances, relative to the reference's magnitude plus an absolute floor:
//  * RoPE: exact (each token is rotated by the same angle, computed the same way);
//  * attention, double: 1e-12; fp32: 2e-5 (the online softmax visits different tiles, so only
//    the summation order differs);
//  * bf16: both sides round an fp32 result once, which may land on neighbouring bf16 values:
//    2^-7 relative (one bf16 ulp) plus 2e-3 absolute for outputs near zero.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/backend/ops.h"

namespace mt {
namespace {

constexpr int kB = 2, kT = 150, kH = 4, kKVH = 2, kD = 20;
constexpr int kRow = (kH + 2 * kKVH) * kD, kOut = kH * kD;

struct Segment {
  int b, start, len;
};

struct Packed {
  std::vector<int32_t> pos;  // [B*T]
  std::vector<Segment> docs;
};

Packed packed_rows() {
  const std::vector<std::vector<int>> rows = {{70, 1, 60, 18, 1}, {150}};
  Packed p;
  for (int b = 0; b < kB; ++b) {
    int t = 0;
    for (int len : rows[size_t(b)]) {
      p.docs.push_back({b, t, len});
      for (int i = 0; i < len; ++i) p.pos.push_back(i);
      t += len;
    }
    EXPECT_EQ(t, kT);
  }
  return p;
}

template <typename S>
std::vector<S> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.5f, 1.5f);
  std::vector<S> v(n);
  for (auto& x : v) {
    if constexpr (std::is_same_v<S, bf16>) x = float_to_bf16(u(rng));
    else x = S(u(rng));
  }
  return v;
}

double value(float x) { return x; }
double value(double x) { return x; }
double value(bf16 x) { return bf16_to_float(x); }

struct Tolerance {
  double rel, abs;
};
template <typename S>
Tolerance tolerance() {
  if constexpr (std::is_same_v<S, double>) return {1e-12, 1e-12};
  else if constexpr (std::is_same_v<S, float>) return {2e-5, 2e-5};
  else return {1.0 / 128, 2e-3};
}

// Rows [start, start + len) of sequence b (row length `width`) copied out / compared.
template <typename S>
std::vector<S> rows_of(const std::vector<S>& v, const Segment& d, int width) {
  const auto first = v.begin() + (long(d.b) * kT + d.start) * width;
  return std::vector<S>(first, first + long(d.len) * width);
}

template <typename S, typename U>
void expect_rows(const std::vector<S>& packed, const std::vector<U>& alone, const Segment& d, int width,
                 const char* what, Tolerance tol) {
  const std::vector<S> got = rows_of(packed, d, width);
  ASSERT_EQ(got.size(), alone.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = value(got[i]), r = value(alone[i]);
    ASSERT_LE(std::abs(g - r), tol.rel * std::abs(r) + tol.abs)
        << what << " of the document at b=" << d.b << " t=" << d.start << " (length " << d.len << "), element "
        << i << ": packed " << g << " alone " << r;
  }
}

template <typename S>
void attention_equals_each_document_alone() {
  using A = acc_t<S>;
  const Ops<S>& ops = cpu_ops<S>();
  const Packed p = packed_rows();
  const size_t N = size_t(kB) * kT;
  const auto qkv = random_values<S>(N * kRow, 1), dout = random_values<S>(N * kOut, 2);
  std::vector<S> out(N * kOut), dqkv(N * kRow);
  std::vector<A> lse(size_t(kB) * kH * kT);
  ops.attention_forward(out.data(), lse.data(), qkv.data(), p.pos.data(), {}, kB, kT, kH, kKVH, kD);
  ops.attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), p.pos.data(), {}, kB, kT, kH,
                         kKVH, kD);
  for (const Segment& d : p.docs) {
    const auto q1 = rows_of(qkv, d, kRow), do1 = rows_of(dout, d, kOut), o_packed = rows_of(out, d, kOut);
    std::vector<S> o1(size_t(d.len) * kOut), dq1(size_t(d.len) * kRow);
    std::vector<A> l1(size_t(kH) * d.len), l_packed(size_t(kH) * d.len);
    ops.attention_forward(o1.data(), l1.data(), q1.data(), nullptr, {}, 1, d.len, kH, kKVH, kD);
    expect_rows(out, o1, d, kOut, "out", tolerance<S>());
    for (int h = 0; h < kH; ++h)
      for (int t = 0; t < d.len; ++t) {
        const double got = lse[(size_t(d.b) * kH + h) * kT + size_t(d.start + t)], ref = l1[size_t(h) * d.len + t];
        l_packed[size_t(h) * d.len + t] = lse[(size_t(d.b) * kH + h) * kT + size_t(d.start + t)];
        ASSERT_NEAR(got, ref, 1e-5 * (1 + std::abs(ref))) << "lse, head " << h << " token " << t;
      }
    // Backward from the packed forward's own out and lse: the same function of the same inputs.
    ops.attention_backward(dq1.data(), do1.data(), q1.data(), o_packed.data(), l_packed.data(), nullptr, {}, 1, d.len, kH,
                           kKVH, kD);
    expect_rows(dqkv, dq1, d, kRow, "dqkv", tolerance<S>());
  }
}

TEST(VarlenAttention, Fp64ForwardBackwardEqualEachDocumentAlone) { attention_equals_each_document_alone<double>(); }
TEST(VarlenAttention, Fp32ForwardBackwardEqualEachDocumentAlone) { attention_equals_each_document_alone<float>(); }
TEST(VarlenAttention, Bf16ForwardBackwardEqualEachDocumentAlone) { attention_equals_each_document_alone<bf16>(); }

// A query must see nothing of an earlier document: changing that document changes no output
// (exactly) of the later ones.
TEST(VarlenAttention, EarlierDocumentsDoNotLeakIntoLaterOnes) {
  const Ops<float>& ops = cpu_ops<float>();
  const Packed p = packed_rows();
  const size_t N = size_t(kB) * kT;
  auto qkv = random_values<float>(N * kRow, 3);
  std::vector<float> out(N * kOut), out2(N * kOut), lse(size_t(kB) * kH * kT);
  ops.attention_forward(out.data(), lse.data(), qkv.data(), p.pos.data(), {}, kB, kT, kH, kKVH, kD);
  for (int t = 0; t < 70; ++t)
    for (int e = 0; e < kRow; ++e) qkv[size_t(t) * kRow + size_t(e)] *= -3.0f;  // row 0's first document
  ops.attention_forward(out2.data(), lse.data(), qkv.data(), p.pos.data(), {}, kB, kT, kH, kKVH, kD);
  for (size_t i = size_t(70) * kOut; i < N * kOut; ++i) ASSERT_EQ(out[i], out2[i]) << "element " << i;
}

template <typename S>
void rope_equals_each_document_alone() {
  const Ops<S>& ops = cpu_ops<S>();
  const Packed p = packed_rows();
  std::vector<float> inv(kD / 2);
  for (int i = 0; i < kD / 2; ++i) inv[size_t(i)] = float(std::pow(10000.0, -2.0 * i / kD));
  const size_t N = size_t(kB) * kT;
  for (const float scale : {1.0f, 1.1386294f}) {
    const auto x = random_values<S>(N * kRow, 4);
    auto fwd = x, bwd = x;
    ops.rope_forward(fwd.data(), inv.data(), p.pos.data(), kB, kT, kH, kKVH, kD, scale);
    ops.rope_backward(bwd.data(), inv.data(), p.pos.data(), kB, kT, kH, kKVH, kD, scale);
    for (const Segment& d : p.docs) {
      auto f1 = rows_of(x, d, kRow), b1 = f1;
      ops.rope_forward(f1.data(), inv.data(), nullptr, 1, d.len, kH, kKVH, kD, scale);
      ops.rope_backward(b1.data(), inv.data(), nullptr, 1, d.len, kH, kKVH, kD, scale);
      expect_rows(fwd, f1, d, kRow, "rope forward", {0, 0});
      expect_rows(bwd, b1, d, kRow, "rope backward", {0, 0});
    }
  }
}

TEST(VarlenRope, Fp32PositionsRestartPerDocument) { rope_equals_each_document_alone<float>(); }
TEST(VarlenRope, Bf16PositionsRestartPerDocument) { rope_equals_each_document_alone<bf16>(); }

// RoPE's scale multiplies cos and sin: the rotated q and k are `scale` times the unscaled ones
// (double, so the only difference is rounding), and v is left alone.
TEST(YarnRopeScale, MultipliesTheRotatedQueriesAndKeys) {
  const Ops<double>& ops = cpu_ops<double>();
  std::vector<float> inv(kD / 2);
  for (int i = 0; i < kD / 2; ++i) inv[size_t(i)] = float(std::pow(10000.0, -2.0 * i / kD));
  const auto x = random_values<double>(size_t(kT) * kRow, 5);
  auto plain = x, scaled = x;
  const double s = 1.1386294361119891;
  ops.rope_forward(plain.data(), inv.data(), nullptr, 1, kT, kH, kKVH, kD, 1.0f);
  ops.rope_forward(scaled.data(), inv.data(), nullptr, 1, kT, kH, kKVH, kD, float(s));
  for (size_t i = 0; i < x.size(); ++i) {
    const bool is_v = int(i % kRow) >= (kH + kKVH) * kD;
    const double want = is_v ? x[i] : plain[i] * double(float(s));
    ASSERT_NEAR(scaled[i], want, 1e-12) << "element " << i << (is_v ? " (v)" : " (q or k)");
  }
}

}  // namespace
}  // namespace mt

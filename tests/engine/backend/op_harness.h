// The op table test's harness (ggml's test-backend-ops in miniature; STYLE.md section 4): runs
// a row (tests/engine/backend/op_rows.h) on any op table, in that table's memory, and checks it
// against the CPU reference in double (cpu_ops<double>()) run on the very same inputs — each
// input rounded to what the table under test stores (bf16 weights and activations, fp32
// statistics and gradients).
//
// Each tensor of a row has the role its op's contract (kernels/*.h, ops.h) gives it:
//  * in: read only, and checked unchanged after the op (bit for bit);
//  * out (=, overwritten): poisoned with NaN first (integers: their minimum), so an element the
//    op does not write fails;
//    where the reference leaves elements alone (a copy or zeroing of a prefix: `untouched`
//    counts them) they must still be NaN, so an op that writes past its extent fails too;
//  * acc (+=, accumulated): prefilled with random values, and the increment is checked (the
//    tolerance scales with the increment, not with the prefill; a table that overwrites, or
//    does nothing, misses by the rms of one of the two, far outside it);
//  * inout: updated in place (RoPE, scale, zero) from random values.
//
// Tolerances, per element: |got - ref| <= round |ref| + rel (|inc| + scale), NaN failing, where
// inc is what the op contributed to the element (ref itself, or ref - prefill for +=) and scale
// the rms of inc over the tensor (elements that cancel to far below the tensor's own scale are
// not asked for relative accuracy):
//  * rel = kFp32 = 2e-5 on every table: every output is a short computation in fp32 (or fp32
//    inside a bf16 op) on the exact inputs — a sum of at most ~40 products (but the sinks'
//    gradient: 740, whose rounding errors of random sign add up to ~sqrt(740) ulps of the
//    terms, as the sum itself grows), one softmax over at most 37 keys, one norm over at most 60
//    values — whose error is a few fp32 ulps (2^-24) of the terms, ~1e-6 of the scale; 2e-5 is
//    the CUDA kernel tests' bound (matmul_test.cc, attention_test.cc), still far below one
//    missing or misplaced term (~scale / sqrt(K));
//  * round = 0 for fp32 storage; 2^-8 for an output stored in bf16: a bf16 table computes in
//    fp32 and rounds each bf16 output once, to nearest (docs/ARCHITECTURE.md, "Mixed
//    precision"), which moves it by at most half an ulp, 2^-8 of its value (8 significant
//    bits); statistics, weight gradients, losses (acc_t<bf16> = fp32) get no such term;
//  * bf16_slack: the one op that rounds an intermediate to bf16 as well — the LM head rounds
//    d(logits) to bf16 before its backward GEMMs (kernels/lm_head_loss.h) — adds a stated
//    fraction of (|inc| + scale) to dx and dW in a bf16 table;
//  * exact: copies (copy_bytes, the embedding lookup, the MoE gather, zeroing) are bit-exact on
//    every table, and so are the discrete outputs: the router's chosen experts (its rows make
//    the top k unambiguous: no two logits of a token within 0.3) and the sort's permutation.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/ops.h"
#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "tests/kernels/test_util.h"

namespace mt::optest {

// ---- tensors and cases ------------------------------------------------------------------------

// Storage of a tensor in a table of element type T.
enum class Kind {
  kT,        // T: weights and activations
  kA,        // acc_t<T>: statistics, weight gradients, losses
  kI32,      // tokens, targets, positions, document starts
  kF32,      // RoPE's inverse frequencies (float in every table)
  kF64,      // the LM head's totals
  kScratch,  // the LM head's scratch for n = chunk * V logits: lm_head_scratch_bytes<T>; never compared
};
enum class Role { kIn, kOut, kAcc, kInOut };

struct Tensor {
  std::string name;
  Kind kind;
  Role role;
  size_t n;                  // elements (logits, for the scratch)
  std::vector<double> data;  // initial contents: random, or NaN for an out
  size_t untouched = 0;      // out: elements the op leaves alone
  bool exact = false;        // compared bit for bit (copies)
  double bf16_slack = 0;     // in a bf16 table, added to the relative tolerance
};

inline constexpr int kNone = -1;  // a tensor index that passes nullptr

// A case's device pointers, read by tensor index as the tensor's kind; kNone gives nullptr.
template <typename T>
class Bufs {
 public:
  Bufs(const std::vector<Tensor>& t, std::vector<void*> p) : t_(t), p_(std::move(p)) {}
  T* t(int i) const { return as<T>(i, Kind::kT); }
  acc_t<T>* a(int i) const { return as<acc_t<T>>(i, Kind::kA); }
  int32_t* i32(int i) const { return as<int32_t>(i, Kind::kI32); }
  float* f32(int i) const { return as<float>(i, Kind::kF32); }
  double* f64(int i) const { return as<double>(i, Kind::kF64); }
  void* scratch(int i) const { return as<void>(i, Kind::kScratch); }

 private:
  template <typename S>
  S* as(int i, Kind k) const {
    if (i == kNone) return nullptr;
    EXPECT_EQ(int(t_[size_t(i)].kind), int(k)) << t_[size_t(i)].name << " read as another kind";
    return static_cast<S*>(p_[size_t(i)]);
  }
  const std::vector<Tensor>& t_;
  std::vector<void*> p_;
};

template <typename T>
using Call = std::function<void(const Ops<T>&, const Bufs<T>&)>;

// One call of one op: its tensors and the call, written once as a generic lambda and kept for
// the reference table (double) and the tables under test (float, bf16).
class Case {
 public:
  int in(std::string name, Kind k, std::vector<double> v) { return add(std::move(name), k, Role::kIn, std::move(v)); }
  int out(std::string name, Kind k, size_t n, size_t untouched = 0) {
    const int i = add(std::move(name), k, Role::kOut, std::vector<double>(n, std::nan("")));
    tensors_.back().untouched = untouched;
    return i;
  }
  int acc(std::string name, Kind k, size_t n) { return add(std::move(name), k, Role::kAcc, random(n)); }
  int inout(std::string name, Kind k, std::vector<double> v) {
    return add(std::move(name), k, Role::kInOut, std::move(v));
  }
  int scratch(size_t logits) { return add("scratch", Kind::kScratch, Role::kOut, std::vector<double>(logits)); }
  Tensor& operator[](int i) { return tensors_[size_t(i)]; }

  // Seeded data: uniform reals, or integers in [lo, hi].
  std::vector<double> random(size_t n, double lo = -1, double hi = 1) { return test::random_vec(n, seed_++, lo, hi); }
  std::vector<double> integers(size_t n, int lo, int hi) {
    std::vector<double> v = random(n, lo, hi + 1);
    for (double& x : v) x = std::min(std::floor(x), double(hi));
    return v;
  }

  template <typename F>
  void run(F f) {
    f64_ = f;
    f32_ = f;
    bf16_ = f;
  }
  template <typename T>
  void call(const Ops<T>& ops, const Bufs<T>& p) const {
    if constexpr (std::is_same_v<T, double>) f64_(ops, p);
    else if constexpr (std::is_same_v<T, float>) f32_(ops, p);
    else bf16_(ops, p);
  }
  const std::vector<Tensor>& tensors() const { return tensors_; }

 private:
  int add(std::string name, Kind k, Role r, std::vector<double> v) {
    const size_t n = v.size();
    tensors_.push_back({std::move(name), k, r, n, std::move(v)});
    return int(tensors_.size()) - 1;
  }
  std::vector<Tensor> tensors_;
  uint32_t seed_ = 1;
  Call<double> f64_;
  Call<float> f32_;
  Call<bf16> bf16_;
};

struct Row {
  const char* op;       // the Ops<T> method (MT_OP: a name that is not one fails to compile)
  const char* variant;  // what this row's arguments exercise
  std::function<Case()> build;
};
#define MT_OP(method) (static_cast<void>(&::mt::Ops<double>::method), #method)

// ---- memory: the host (bare op tables) or a Backend's device arena and copy streams ---------

class Device {
 public:
  virtual ~Device() = default;
  virtual void* alloc(size_t bytes) = 0;
  // Ordered before any op issued after it; `src` stays alive until the next download returns.
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  // After every op issued before it; complete on return.
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  virtual Status error() const { return Status::Ok(); }
};

class HostDevice final : public Device {
 public:
  void* alloc(size_t bytes) override { return blocks_.emplace_back((bytes + 7) / 8 + 1).data(); }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }

 private:
  std::deque<std::vector<uint64_t>> blocks_;  // 8-byte aligned
};

// A Backend's arena (reserved once: allocations only bump it), its H2D and D2H streams, and
// events that order them around the compute stream, as the executor uses them.
class BackendDevice final : public Device {
 public:
  explicit BackendDevice(Backend& b, size_t arena_bytes = size_t(256) << 20) : b_(b) {
    const Status s = b_.reserve_device(arena_bytes);
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  void* alloc(size_t bytes) override {
    Result<void*> p = b_.device_alloc(bytes);
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    return p.ok() ? *p : nullptr;
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    b_.copy_h2d(dst, src, bytes);
    b_.stream_wait(StreamKind::kCompute, b_.record(StreamKind::kH2D));
  }
  void download(void* dst, const void* src, size_t bytes) override {
    b_.stream_wait(StreamKind::kD2H, b_.record(StreamKind::kCompute));
    b_.copy_d2h(dst, src, bytes);
    b_.host_wait(b_.record(StreamKind::kD2H));
  }
  Status error() const override { return b_.error(); }

 private:
  Backend& b_;
};

// ---- storage: a tensor's values as table T stores them ----------------------------------------

// Calls f(S{}) with S the storage type of kind k in table T (not for kScratch).
template <typename T, typename F>
decltype(auto) with_storage(Kind k, F&& f) {
  switch (k) {
    case Kind::kT: return f(T{});
    case Kind::kA: return f(acc_t<T>{});
    case Kind::kI32: return f(int32_t{});
    case Kind::kF32: return f(float{});
    default: return f(double{});
  }
}

template <typename T>
std::vector<char> encode(const Tensor& t, const std::vector<double>& v) {
  if (t.kind == Kind::kScratch) return std::vector<char>(lm_head_scratch_bytes<T>(int(t.n), 1), char(0xff));
  return with_storage<T>(t.kind, [&](auto tag) {
    using S = decltype(tag);
    std::vector<char> bytes(v.size() * sizeof(S));
    for (size_t i = 0; i < v.size(); ++i) {
      S s;
      if constexpr (std::is_same_v<S, bf16>) s = float_to_bf16(float(v[i]));
      else if constexpr (std::is_integral_v<S>) s = std::isnan(v[i]) ? std::numeric_limits<S>::min() : S(v[i]);
      else s = S(v[i]);
      std::memcpy(bytes.data() + i * sizeof(S), &s, sizeof(S));
    }
    return bytes;
  });
}

template <typename T>
std::vector<double> decode(const Tensor& t, const std::vector<char>& bytes) {
  if (t.kind == Kind::kScratch) return {};
  return with_storage<T>(t.kind, [&](auto tag) {
    using S = decltype(tag);
    std::vector<double> v(bytes.size() / sizeof(S));
    for (size_t i = 0; i < v.size(); ++i) {
      S s;
      std::memcpy(&s, bytes.data() + i * sizeof(S), sizeof(S));
      if constexpr (std::is_same_v<S, bf16>) v[i] = bf16_to_float(s);
      else v[i] = double(s);
    }
    return v;
  });
}

// Runs the case's call on `ops` in `dev`'s memory from the given initial contents; returns every
// tensor's contents afterwards (empty for the scratch).
template <typename T>
std::vector<std::vector<double>> run(const Case& c, const Ops<T>& ops, Device& dev,
                                     const std::vector<std::vector<double>>& init) {
  const std::vector<Tensor>& ts = c.tensors();
  std::vector<std::vector<char>> host(ts.size());
  std::vector<void*> p(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    host[i] = encode<T>(ts[i], init[i]);
    p[i] = dev.alloc(host[i].size());
    dev.upload(p[i], host[i].data(), host[i].size());
  }
  c.call<T>(ops, Bufs<T>(ts, p));
  std::vector<std::vector<double>> after(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    if (ts[i].kind == Kind::kScratch) continue;
    std::vector<char> back(host[i].size());
    dev.download(back.data(), p[i], back.size());
    after[i] = decode<T>(ts[i], back);
  }
  return after;
}

// ---- comparison -------------------------------------------------------------------------------

inline constexpr double kFp32 = 2e-5;
inline constexpr double kBf16Round = 1.0 / 256;

inline void expect_close(const Tensor& t, const std::vector<double>& got, const std::vector<double>& ref,
                         const std::vector<double>& before, double round, double rel) {
  ASSERT_EQ(got.size(), ref.size()) << t.name;
  auto inc = [&](size_t i) { return t.role == Role::kAcc ? ref[i] - before[i] : ref[i]; };
  double ss = 0;
  size_t untouched = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(ref[i])) ++untouched;
    else ss += inc(i) * inc(i);
  }
  ASSERT_EQ(untouched, t.untouched) << t.name << ": elements the reference leaves alone (NaN)";
  const double scale = untouched < ref.size() ? std::sqrt(ss / double(ref.size() - untouched)) : 0;
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(ref[i])) {
      if (!std::isnan(got[i]) && ++bad <= 5)
        ADD_FAILURE() << t.name << "[" << i << "]: " << got[i] << " written where the op must not write";
      continue;
    }
    const double tol = t.exact ? 0 : round * std::fabs(ref[i]) + rel * (std::fabs(inc(i)) + scale);
    if (!(std::fabs(got[i] - ref[i]) <= tol) && ++bad <= 5)  // written so that NaN fails
      ADD_FAILURE() << t.name << "[" << i << "]: got " << got[i] << ", want " << ref[i] << " (tol " << tol
                    << (t.role == Role::kAcc ? ", += onto " + std::to_string(before[i]) : std::string()) << ")";
  }
  EXPECT_EQ(bad, 0) << t.name << ": " << bad << " of " << ref.size() << " elements out of tolerance (scale " << scale
                    << ")";
}

// The row on `ops` (in `dev`'s memory) against cpu_ops<double>() on the same rounded inputs.
template <typename T>
void expect_row_matches(const Row& row, const Ops<T>& ops, Device& dev) {
  const Case c = row.build();
  const std::vector<Tensor>& ts = c.tensors();
  std::vector<std::vector<double>> init(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) init[i] = decode<T>(ts[i], encode<T>(ts[i], ts[i].data));
  const auto got = run<T>(c, ops, dev, init);
  const Status s = dev.error();
  ASSERT_TRUE(s.ok()) << s.to_string();
  HostDevice host;
  const auto ref = run<double>(c, cpu_ops<double>(), host, init);
  constexpr bool bf16_table = std::is_same_v<T, bf16>;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    if (t.kind == Kind::kScratch) continue;
    if (t.role == Role::kIn) {
      EXPECT_TRUE(got[i] == init[i]) << "the op wrote its input " << t.name;
      continue;
    }
    const bool bf16_storage = bf16_table && t.kind == Kind::kT;
    expect_close(t, got[i], ref[i], init[i], bf16_storage ? kBf16Round : 0, kFp32 + (bf16_table ? t.bf16_slack : 0));
  }
}

}  // namespace mt::optest

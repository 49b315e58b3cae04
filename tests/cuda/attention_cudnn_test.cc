// cuDNN's fused attention (kernels/cuda/attention_cudnn.cuh) against the CPU reference in double
// on the same bf16-rounded inputs, against our simt kernel, and for bit-reproducibility (its
// backward is built deterministic). Shapes: T = 333, 2049 (odd, tiles cut mid-way) and 2048;
// GQA ratios 1, 4 and 8; head_dim 64 and 128; one document per row (one dense call) and packed
// documents of unequal lengths with a document of length 1 at each row's start and end (ragged
// calls). T = 1 cuDNN's backward refuses (s_q = s_kv = 1): refused by name, our kernels run it.
//
// Tolerances (attention_cases.h): those of the tensor-core test — relative 1/128 for out, 1/64
// for dqkv, 1e-5 for lse, plus per element u * sum|terms| for the bf16 operands. cuDNN's flash
// attention rounds at the same points as ours (P to bf16 before P @ V and P^T @ dO, dS to bf16
// before dS @ K and dS^T @ Q; fp32 accumulation, fp32 statistics), so the same bound holds; a
// wrong mask, offset or document length is far outside it. Outputs start as NaN (DeviceBuf), so
// an element cuDNN never wrote fails. Every failure names its tensor and (b, h, t, d).
// Skips without a device, and (by name) in a build without the cuDNN frontend.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "kernels/attention.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_cudnn.cuh"
#include "tests/cuda/attention_cases.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/test_paths.h"

namespace mt {
namespace {

using cudatest::DeviceBuf;
using cudatest::expect_bitwise;
using cudatest::expect_close;
using cudatest::got;
using cudatest::nv;
using namespace attn_cases;

#define MT_REQUIRE_CUDNN() MT_REQUIRE_CUDNN_BUILD()

// One CudnnAttention with its workspace, sized for the largest case here; `pad`: its batching of
// packed rows (unset: the runtime's, cudnn_pads_documents).
struct Cudnn {
  DeviceBuf<char> workspace;
  std::unique_ptr<cuda::CudnnAttention> attn;
  Cudnn(int B, int T, std::optional<bool> pad = std::nullopt)
      : workspace(cuda::cudnn_attention_workspace_bytes(B, T, 8, 1, 128)) {
    const auto st = cuda::CudnnAttention::create(attn, workspace.get(), workspace.size(), pad);
    EXPECT_TRUE(st.ok()) << cuda::describe(st);
  }
};

// The spans of the case's documents, on the host and the device (nullptr without documents).
struct Spans {
  std::vector<int32_t> starts;
  DeviceBuf<int32_t> device;
  DocumentSpans spans;
  Spans(const Case& c, const Inputs& in)
      : starts(document_starts(in.p(), c.B, c.T)), device(starts.empty() ? std::vector<int32_t>{0} : starts) {
    spans = {starts.data(), device.get(), int(starts.size()) - 1};
  }
  const DocumentSpans* get() const { return starts.empty() ? nullptr : &spans; }
};

// `v` into the start of `b` (longer: the rest stays NaN).
void copy_in(DeviceBuf<bf16>& b, const std::vector<bf16>& v) {
  ASSERT_GE(b.size(), v.size());
  ASSERT_EQ(cudaSuccess, cudaMemcpy(b.get(), v.data(), v.size() * sizeof(bf16), cudaMemcpyHostToDevice));
}

// cuDNN's forward, then its backward on the forward's own out and lse. qkv and dout are followed
// by a tile (128 rows) of NaN: cuDNN reads K/V rows past a document's end (masked, but they
// may take part in P @ V); past the last document of the last row they lie beyond the tensor,
// and if they counted, that document's outputs would turn NaN here instead of passing on zeros.
Outputs run_cudnn(Cudnn& k, const Case& c, const Inputs& in) {
  const Spans sp(c, in);
  const size_t tail = 128 * size_t(c.H + 2 * c.KVH) * c.D, out_tail = 128 * size_t(c.H) * c.D;
  // The outputs are followed by a guard of NaN that must stay NaN: a write past a tensor's end
  // (a padding document's offsets, the last row's) would go unseen otherwise.
  constexpr size_t kGuard = 4096;
  DeviceBuf<bf16> gqkv(c.nqkv() + tail), gdout(c.nout() + out_tail), gout(c.nout() + kGuard),
      gdqkv(c.nqkv() + kGuard);
  copy_in(gqkv, in.qkv.h);
  copy_in(gdout, in.dout.h);
  DeviceBuf<float> glse(c.nlse() + kGuard);  // DeviceBuf poisons with NaN
  const cuda::AttentionShape s{c.B, c.T, c.H, c.KVH, c.D};
  std::string why;
  Outputs o;
  if (!k.attn->supports(s, sp.get(), &why)) {
    ADD_FAILURE() << "cuDNN refused " << c.str() << ": " << why;
    return o;
  }
  const auto st = cudatest::test_stream();
  const auto fwd = k.attn->forward(nv(gout), glse.get(), nv(gqkv), s, sp.get(), st);
  EXPECT_TRUE(fwd.ok()) << cuda::describe(fwd);
  const auto bwd = k.attn->backward(nv(gdqkv), nv(gdout), nv(gqkv), nv(gout), glse.get(), s, sp.get(), st);
  EXPECT_TRUE(bwd.ok()) << cuda::describe(bwd);
  o.out = got(gout);
  o.lse = glse.download();
  o.dqkv = got(gdqkv);
  auto untouched = [&](std::vector<float>& v, size_t n, const char* what) {  // checks the guard, drops it
    const size_t written = size_t(std::count_if(v.begin() + long(n), v.end(), [](float x) { return !std::isnan(x); }));
    EXPECT_EQ(written, 0u) << what << ": " << written << " values written past its end";
    v.resize(n);
  };
  untouched(o.out, c.nout(), "out");
  untouched(o.lse, c.nlse(), "lse");
  untouched(o.dqkv, c.nqkv(), "dqkv");
  return o;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int D : {64, 128})
    for (bool docs : {false, true})
      for (int T : {333, 2049})
        for (auto [H, KVH] : {std::pair{4, 4}, std::pair{8, 2}, std::pair{8, 1}}) out.push_back({2, T, H, KVH, D, docs});
  out.push_back({1, 2048, 8, 1, 128, true});
  return out;
}

// cuDNN's forward and backward of case `c` against the CPU reference in double.
void expect_matches_cpu(Cudnn& k, const Case& c) {
  SCOPED_TRACE(c.str());
  const Inputs in(c);
  const Outputs g = run_cudnn(k, c, in);
  if (::testing::Test::HasFailure()) return;
  const Slack slack = rounding_slack(c, in, g.out, g.lse);
  std::vector<double> out(c.nout()), lse(c.nlse()), dqkv(c.nqkv());
  cpu::attention_forward(out.data(), lse.data(), in.qkv.d.data(), in.p(), c.B, c.T, c.H, c.KVH, c.D);
  expect_close(g.out, out, kOut, "out", 0, at_out(c), slack.out);
  expect_close(g.lse, lse, kLse, "lse", 0, at_lse(c));
  const auto out_b = g.out_d();  // the backward's operands: the bf16 output cuDNN stored
  cpu::attention_backward(dqkv.data(), in.dout.d.data(), in.qkv.d.data(), out_b.data(), g.lse_d().data(), in.p(),
                          c.B, c.T, c.H, c.KVH, c.D);
  expect_close(g.dqkv, dqkv, kGrad, "dqkv", 0, at_qkv(c), slack.dqkv);
}

TEST(CudaAttentionCudnn, MatchesCpuReference) {
  MT_REQUIRE_CUDA();
  MT_REQUIRE_CUDNN();
  Cudnn k(2, 2049);
  ASSERT_TRUE(k.attn);
  for (const Case& c : cases()) {
    if (cudatest::emulated() && !c.docs && c.T > 1024) continue;  // the reference interpreter: O(T^2) a head
    expect_matches_cpu(k, c);
    if (HasFailure()) break;  // the first failing shape, fully described, is enough
  }
}

// Packed rows in calls of exactly their documents and padded with empty ones to a power of two
// (attention_ragged.h: batch_for). Emulated, both; on a device, the runtime's choice — which
// MEGATRAIN_CUDNN_PAD_DOCUMENTS=1 forces to padding, as scripts/gpu_check.sh does once to record
// what cuDNN < 9.25 does with empty documents.
TEST(CudaAttentionCudnn, PackedRowsUnderEitherBatching) {
  MT_REQUIRE_CUDA();
  MT_REQUIRE_CUDNN();
  const std::vector<bool> batchings =
      cudatest::emulated() ? std::vector<bool>{false, true} : std::vector<bool>{cuda::cudnn_pads_documents()};
  for (bool pad : batchings) {
    SCOPED_TRACE(pad ? "padded to powers of two" : "exactly the documents");
    Cudnn k(2, 517, pad);
    ASSERT_TRUE(k.attn);
    EXPECT_EQ(k.attn->pads_documents(), pad);
    for (const Case& c : {Case{2, 333, 4, 2, 64, true}, Case{2, 517, 8, 1, 128, true}}) expect_matches_cpu(k, c);
    if (HasFailure()) return;
  }
}

TEST(CudaAttentionCudnn, AgreesWithSimtKernel) {
  MT_REQUIRE_CUDA();
  MT_REQUIRE_CUDNN();
  Cudnn k(2, 517);
  ASSERT_TRUE(k.attn);
  const cudatest::AttentionKernelScope simt_scope(cuda::AttentionKernel::kSimt);
  for (bool docs : {false, true})
    for (const Case c : {Case{2, 333, 4, 2, 64, docs}, Case{2, 517, 8, 1, 128, docs}}) {
      SCOPED_TRACE(c.str());
      const Inputs in(c);
      const Outputs g = run_cudnn(k, c, in);
      DeviceBuf<bf16> gqkv(in.qkv.h), gdout(in.dout.h), gout(c.nout()), gdqkv(c.nqkv());
      DeviceBuf<float> glse(c.nlse());
      DeviceBuf<int32_t> gpos(in.pos.empty() ? std::vector<int32_t>{0} : in.pos);
      const int32_t* pos = in.pos.empty() ? nullptr : gpos.get();
      const auto st = cudatest::test_stream();
      MT_EXPECT_CUDA_OK(cuda::attention_forward(nv(gout), glse.get(), nv(gqkv), pos, c.B, c.T, c.H, c.KVH, c.D, st));
      MT_EXPECT_CUDA_OK(cuda::attention_backward(nv(gdqkv), nv(gdout), nv(gqkv), nv(gout), glse.get(), pos, c.B, c.T,
                                                 c.H, c.KVH, c.D, st));
      const Outputs simt{got(gout), glse.download(), got(gdqkv)};
      const Slack slack = rounding_slack(c, in, simt.out, simt.lse);
      expect_close(g.out, simt.out_d(), kOut, "out vs simt", 0, at_out(c), slack.out);
      expect_close(g.lse, simt.lse_d(), kLse, "lse vs simt", 0, at_lse(c));
      expect_close(g.dqkv, {simt.dqkv.begin(), simt.dqkv.end()}, kGrad, "dqkv vs simt", 0, at_qkv(c), slack.dqkv);
      if (HasFailure()) return;
    }
}

TEST(CudaAttentionCudnn, BitReproducible) {
  MT_REQUIRE_CUDA();
  MT_REQUIRE_CUDNN();
  Cudnn k(2, 2049);
  ASSERT_TRUE(k.attn);
  for (const Case c : {Case{2, 2049, 8, 1, 128, true}, Case{2, 333, 4, 2, 64, false}}) {
    SCOPED_TRACE(c.str());
    const Inputs in(c);
    const Outputs a = run_cudnn(k, c, in), b = run_cudnn(k, c, in);
    expect_bitwise(a.out, b.out, "out");
    expect_bitwise(a.lse, b.lse, "lse");
    expect_bitwise(a.dqkv, b.dqkv, "dqkv");
  }
}

// What the op table relies on: a shape is refused with its reason, never half-run — here a
// workspace of 0 bytes for a backward that needs one, and positions whose spans are missing.
TEST(CudaAttentionCudnn, RefusesWhatItCannotRun) {
  MT_REQUIRE_CUDA();
  MT_REQUIRE_CUDNN();
  std::unique_ptr<cuda::CudnnAttention> attn;
  const auto st = cuda::CudnnAttention::create(attn, nullptr, 0);
  ASSERT_TRUE(st.ok()) << cuda::describe(st);
  std::string why;
  if (!cudatest::emulated()) {  // the workspace a graph asks for is the library's (emulated: none)
    EXPECT_FALSE(attn->supports({2, 4096, 8, 1, 128}, nullptr, &why)) << "a deterministic backward without workspace";
    EXPECT_NE(why.find("workspace"), std::string::npos) << why;
  }
  EXPECT_FALSE(attn->supports({2, 64, 8, 1, 60}, nullptr, &why));
  EXPECT_NE(why.find("multiple of 8"), std::string::npos) << why;
  const std::vector<int32_t> one_row = {0, 64};  // spans of one row for a batch of two
  const DocumentSpans short_spans{one_row.data(), one_row.data(), 1};
  EXPECT_FALSE(attn->supports({2, 64, 8, 1, 128}, &short_spans, &why));
  EXPECT_NE(why.find("spans of every row"), std::string::npos) << why;
  // Packed rows of 2 heads x 333 tokens: the second row's statistics would start 8 bytes off a
  // 16-byte boundary, which cuDNN assumes and does not check for them.
  const std::vector<int32_t> two_rows = {0, 100, 333, 400};
  const DocumentSpans odd_spans{two_rows.data(), two_rows.data(), 4};
  EXPECT_FALSE(attn->supports({2, 333, 2, 1, 128}, &odd_spans, &why));
  EXPECT_NE(why.find("multiple of 4"), std::string::npos) << why;
  // One token a row: cuDNN's backward refuses s_q = s_kv = 1 (the frontend says why).
  Cudnn k(2, 1);
  EXPECT_FALSE(k.attn->supports({2, 1, 8, 1, 128}, nullptr, &why));
  EXPECT_NE(why.find("cuDNN cannot run"), std::string::npos) << why;
}

// The workspace reserved for a micro-batch covers what cuDNN asks for the shapes the issue
// names (qwen2.5-7b's heads at 4K, dense and packed with GQA) — a refusal there would silently
// run our own kernels instead.
TEST(CudaAttentionCudnn, TheReservedWorkspaceTakesTheRealShapes) {
  MT_REQUIRE_CUDA();
  MT_REQUIRE_CUDNN();
  const int T = 4096, H = 28, KVH = 4, D = 128;
  DeviceBuf<char> ws(cuda::cudnn_attention_workspace_bytes(1, T, H, KVH, D));
  std::unique_ptr<cuda::CudnnAttention> attn;
  ASSERT_TRUE(cuda::CudnnAttention::create(attn, ws.get(), ws.size()).ok());
  std::string why;
  EXPECT_TRUE(attn->supports({1, T, H, KVH, D}, nullptr, &why)) << why;
  // Packed: one long document, then many short ones (one call would need ~T^3 of dP).
  std::vector<int32_t> starts = {0, 3000};
  for (int t = 3000 + 7; t < T; t += 7) starts.push_back(t);
  starts.push_back(T);
  const DocumentSpans spans{starts.data(), starts.data(), int(starts.size()) - 1};
  EXPECT_TRUE(attn->supports({1, T, H, KVH, D}, &spans, &why)) << why;
  std::printf("workspace reserved %zu, used %zu\n", ws.size(), attn->workspace_used());
}

// cuDNN's heuristics and check_support for an sm_90 device without one (cudnn_check_engines):
// tests/fixtures/cudnn/sm90_h100_sxm.json describes an H100 SXM (its "_source" names where each
// value comes from; scripts/gpu_check.sh records a real device's to replace it). cuDNN offers its
// runtime-compiled engines (the SDPA on sm_90) only where libcuda.so.1 loads: without a driver,
// the CUDA toolkit's stub is loaded (RTLD_LOCAL; cuDNN's own dlopen by name then finds it), which
// answers the engines' queries and fails only what needs a device (loading a kernel: build_plans,
// not asked here). Unavailable (an older cuDNN, no driver and no stub), the graphs are lowered only.
struct Sm90Engines {
  std::string json, unavailable;
  Sm90Engines() {
    std::ifstream in(testing_util::fixture_source_dir() + "/tests/fixtures/cudnn/sm90_h100_sxm.json");
    json.assign(std::istreambuf_iterator<char>(in), {});
    if (json.empty()) unavailable = "no tests/fixtures/cudnn/sm90_h100_sxm.json";
    if (cuda::cudnn_runtime_version() < 91100) unavailable = "cuDNN < 9.11 has no deviceless heuristics";
    if (unavailable.empty() && !driver_or_stub()) unavailable = "no libcuda.so.1 and no CUDA toolkit stub to load";
    if (!unavailable.empty()) std::printf("engines not checked: %s\n", unavailable.c_str());
  }
  bool ready() const { return unavailable.empty(); }
  static bool driver_or_stub() {
    if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) return true;
    const char* home = std::getenv("CUDA_HOME");
    for (const std::string& dir : {std::string(home ? home : "/usr/local/cuda") + "/lib64",
                                   std::string("/usr/local/cuda/targets/x86_64-linux/lib")})
      if (dlopen((dir + "/stubs/libcuda.so").c_str(), RTLD_NOW | RTLD_LOCAL)) {
        std::printf("libcuda.so.1: the CUDA toolkit's stub in %s/stubs\n", dir.c_str());
        return true;
      }
    return false;
  }
  // One line per graph: its engine configs by name, or cuDNN's refusal.
  void report(const std::map<std::string, cuda::CudnnEngineCheck>& checked) const {
    if (!ready()) return;
    for (const auto& [name, r] : checked) {
      std::string engines;
      for (const std::string& e : r.engines) engines += (engines.empty() ? "" : " ") + e;
      std::printf("%s: %s\n", name.c_str(), r.refused.empty() ? ("engines " + engines).c_str() : r.refused.c_str());
    }
    std::printf("%zu graphs have an engine for the described sm_90 (or are named above)\n", checked.size());
  }
};

// The frontend's own checks of every graph pair the tests above and the step benches build, for
// sm_90, their lowering to cuDNN's backend descriptors, and cuDNN's heuristics and check_support
// for the described H100 (Sm90Engines), on any machine (no device, no handle): a graph the
// frontend, the backend or every engine would refuse on the lease fails here first. The step shapes: qwen2.5-7b's heads (28/4, D 128) at 2K, 4K and 32K, dense and packed
// (the bench's documents of 1..1023 tokens: buckets of 2^k documents of 2^j tokens); Gemma 3's
// sliding windows with their scales (1b: D 256, 27b: D 128); llama's 32/8 at D 128; qwen3's 16/8
// at D 128 and 64; qwen3-30b-a3b, gpt-oss-120b (with and without its 128-token window), phi-4 and
// olmo-2.
TEST(CudaAttentionCudnn, TheFrontendAcceptsEveryGraphForSm90) {
  MT_REQUIRE_CUDNN();
  const Sm90Engines engines;
  std::map<std::string, cuda::CudnnEngineCheck> checked;  // every graph's engines, asked once
  auto check = [&](const cuda::AttentionShape& s, const std::vector<int32_t>& starts, const std::string& what) {
    const DocumentSpans spans{starts.data(), starts.data(), int(starts.size()) - 1};
    for (bool pad : {false, true}) {  // packed rows batched exactly or padded (batch_for)
      const DocumentSpans* docs = starts.empty() ? nullptr : &spans;
      // With a described device the engine check validates and lowers each graph itself, once.
      const std::string why = engines.ready() ? cuda::cudnn_check_engines(s, docs, 90, pad, engines.json, checked)
                                              : cuda::cudnn_validate_graphs(s, docs, 90, pad);
      EXPECT_EQ(why, "") << what << " B=" << s.B << " T=" << s.T << " H=" << s.H << " KVH=" << s.KVH
                         << " D=" << s.D << " window=" << s.opt.window << (pad ? " padded" : " exact");
      if (starts.empty()) break;  // the dense call has no batching to choose
    }
  };
  for (const Case& c : cases()) {
    const Inputs in(c);
    check({c.B, c.T, c.H, c.KVH, c.D}, document_starts(in.p(), c.B, c.T), c.str());
  }
  for (int T : {2048, 4096, 32768}) {
    check({1, T, 28, 4, 128}, {}, "qwen2.5-7b dense");
    for (int len : {1, 7, 64, 1023}) {  // one row of documents of `len` tokens (the last shorter)
      std::vector<int32_t> starts;
      for (int t = 0; t < T; t += len) starts.push_back(t);
      starts.push_back(T);
      check({1, T, 28, 4, 128}, starts, "qwen2.5-7b packed, documents of " + std::to_string(len));
    }
  }
  check({2, 4096, 32, 8, 128}, {}, "llama3-8b");
  check({1, 4096, 32, 4, 128}, {}, "qwen3-30b-a3b");
  check({1, 4096, 40, 10, 128}, {}, "phi-4");
  check({1, 4096, 40, 40, 128}, {}, "olmo-2-13b");
  for (int window : {0, 128}) {  // gpt-oss-120b: full and sliding-window layers alternate
    cuda::AttentionShape gpt_oss{1, 4096, 64, 8, 64};
    gpt_oss.opt.window = window;
    check(gpt_oss, {}, "gpt-oss-120b");
  }
  check({2, 4096, 16, 8, 128}, {}, "qwen3-8b");
  check({2, 4096, 16, 8, 64}, {}, "qwen3, head_dim 64");
  for (auto [H, KVH, D, window, scalar] : {std::tuple{4, 1, 256, 512, 256}, std::tuple{32, 16, 128, 1024, 168}}) {
    cuda::AttentionShape gemma{2, 4096, H, KVH, D};  // gemma-3-1b, gemma-3-27b
    gemma.opt.window = window, gemma.opt.scale = 1.0 / std::sqrt(double(scalar));
    check(gemma, {}, "gemma-3 sliding window");
  }
  engines.report(checked);
  // The check can fail: a head_dim cuDNN has no SDPA for.
  EXPECT_NE(cuda::cudnn_validate_graphs({1, 64, 4, 4, 1024}, nullptr, 90, false), "");
  // And past validate(): an output whose dims validate() never compares, refused by cuDNN's
  // matmul when the graph is lowered (cuDNN >= 9.8 lowers without a handle).
  if (cuda::cudnn_runtime_version() >= 90800) {
    const std::string why =
        cuda::cudnn_validate_graphs({1, 64, 4, 4, 128}, nullptr, 90, false, cuda::CudnnGraphFault::kOutputRows);
    EXPECT_NE(why.find("lowering"), std::string::npos) << why;
    EXPECT_NE(why.find("CUDNN_STATUS_BAD_PARAM"), std::string::npos) << why;
  }
  // And past lowering: the same device with 48 KiB of shared memory a block (no opt-in beyond),
  // where cuDNN's heuristics offer no SDPA engine and say why.
  if (engines.ready()) {
    std::string small = engines.json;
    small.replace(small.find("232448"), 6, "49152");
    std::map<std::string, cuda::CudnnEngineCheck> none;
    const std::string why = cuda::cudnn_check_engines({1, 128, 4, 4, 128}, nullptr, 90, false, small, none);
    EXPECT_NE(why.find("heuristics"), std::string::npos) << why;
    EXPECT_NE(why.find("SHARED_MEMORY_INSUFFICIENT"), std::string::npos) << why;
  }
}

// The real device's description for cuDNN's deviceless heuristics (cudnn_describe_device), also
// written to $MEGATRAIN_CUDNN_DEVICE_JSON when set: scripts/gpu_check.sh records it, so that a
// lease's values replace those tests/fixtures/cudnn/sm90_h100_sxm.json was written from.
TEST(CudaAttentionCudnn, DescribesTheDeviceForDevicelessHeuristics) {
  MT_REQUIRE_CUDA();
  MT_REQUIRE_CUDNN();
  if (cudatest::emulated()) GTEST_SKIP() << "the emulated device is not one cuDNN can describe";
  if (cuda::cudnn_runtime_version() < 91100) GTEST_SKIP() << "cuDNN < 9.11 serializes no device properties";
  std::string json;
  ASSERT_EQ(cuda::cudnn_describe_device(0, json), "");
  EXPECT_NE(json.find("multiProcessorCount"), std::string::npos) << json;
  std::printf("%s\n", json.c_str());
  if (const char* path = std::getenv("MEGATRAIN_CUDNN_DEVICE_JSON")) {
    std::ofstream out(path);
    out << json << "\n";
    EXPECT_TRUE(out.good()) << path;
  }
}

// The library found at run time (no device needed): CudnnAttention::create refuses one older
// than the headers; this process's is named in every bench JSON, with its batching of packed
// rows (empty documents only from 9.25).
TEST(CudaAttentionCudnn, RuntimeLibraryIsNamed) {
  MT_REQUIRE_CUDNN();
  EXPECT_GE(cuda::cudnn_runtime_version(), 90000u);
  EXPECT_NE(cuda::cudnn_describe().find("built against"), std::string::npos) << cuda::cudnn_describe();
  EXPECT_NE(cuda::cudnn_describe().find(cuda::cudnn_pads_documents() ? "padded" : "exactly"), std::string::npos)
      << cuda::cudnn_describe();
  if (!std::getenv("MEGATRAIN_CUDNN_PAD_DOCUMENTS")) {
    EXPECT_EQ(cuda::cudnn_pads_documents(), cuda::cudnn_runtime_version() >= 92500);
  }
  std::printf("%s\n", cuda::cudnn_describe().c_str());
}

}  // namespace
}  // namespace mt

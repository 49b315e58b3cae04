// The unchanged StreamingExecutor on the CudaBackend: a tiny model trained for several steps
// matches the CPU backend's losses, and the same run twice is bit-identical.
//  * fp32: within 1e-4 relative (the two differ only in summation order and exp/sqrt rounding);
//  * bf16 (MixedPrecision/*): within 5e-4 relative per step. Both op tables round at the same
//    points, so only summation order differs, and it shows as rare bf16 ulp flips that
//    training then carries along. Emulated on the CPU — every bf16 output perturbed by
//    1e-6 relative before its rounding (~17 fp32 ulps, more than two summation orders
//    differ by) — it moves these five losses by at most 1.1e-4 relative (2.4e-7: 2.2e-5);
//    the bound is 4x that. (It does not separate bf16 from fp32 — their gap here is 4e-4 by
//    step 5 —: the op tests in bf16_ops_test.cc check every rounding point.)
//  * bf16 mixtures of experts (Moe/Bf16_*): within 3e-3 relative. Routing is discontinuous:
//    once the bf16 ulp flips above have moved the weights, a token near a tie between two
//    experts goes to the other one, and each such move shifts the loss by ~1e-4. Measured under
//    the CUDA emulation (tests/cuda_emu, 2026-12-07): the fp32 MoE cases agree to 1.1e-7; in
//    bf16 the experts' token counts of Bf16_qwen3_moe are the same on both backends at step 0
//    and not at step 1, and the gap reaches 7.6e-4 by step 5 (Bf16_gpt_oss_compact; 7.1e-4
//    Bf16_qwen3_moe). Bf16_qwen3_moe's step-0 loss differs by 1.9e-5 (dense bf16 cases: 1e-9)
//    from one such flip: layer 0's attention output at token 35, head 2, dim 2 is -0.443359375
//    on the CPU and -0.4453125 on the CUDA kernel, whose exact value (in double, from the same
//    bf16 inputs) -0.44433595189 lies 1.4e-8 from their midpoint -0.4443359375, inside fp32's
//    rounding; layer 1's router amplifies it (2026-12-07, sixth session, docs/PERF.md).
//    3e-3 is 4x the measured gap; the GPU run replaces it.
//  * bf16 with cuDNN attention (Cudnn/*): within 2e-3 relative. cuDNN also rounds the softmax
//    probabilities and dS to bf16 as tensor-core operands (attention_cudnn_test.cc), which the
//    CPU table does not: per element up to 2^-8 of each term, averaged over the keys. On the
//    emulated device, whose cuDNN interpreter (tests/cuda_emu/cudnn_emu.cc) rounds P and dS where
//    cuDNN does, the dense cases' largest gap is 2.2e-4 and Cudnn_bf16_qwen2_moe's 6.3e-4
//    (2026-12-07); the GPU run measures the real one (docs/PERF.md). An MoE's load-balancing
//    loss is compared within 1.5e-2 on cuDNN: it moves in steps as tokens change experts (one
//    token of the 240 routed per layer here changing experts moves it by a few 1e-4 relative),
//    and the rounding of P moves more of them; measured 4.9e-3 under the emulation.
#include <gtest/gtest.h>

#include <ostream>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/exec/streaming_executor.h"
#include "kernels/cuda/attention_cudnn.cuh"
#include "tests/cuda/cuda_test_util.h"
#include "engine/io/hf_io.h"
#include "tests/engine/model/family_fixture.h"
#include "tests/engine/model/moe_fixture.h"
#include "tests/engine/test_model.h"

namespace mt {
namespace {

ModelConfig tiny(bool tied, bool qwen) {
  return testing_util::test_model_config({qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM", 64, 3, 4, 2, 96, 97, tied});
}

TrainOptions options(MemoryLayout layout, Precision precision) {
  TrainOptions o;
  o.precision = precision;
  o.seq_len = 40;
  o.micro_batch = 2;
  o.global_batch = 6;
  o.optimizer.lr = 3e-3f;
  o.optimizer.grad_clip = 0.5f;
  o.schedule = {2, LrDecay::kCosine, 0.1f, 6};
  o.layout = layout;
  return o;
}

struct Case {
  const char* name;
  bool tied, qwen;
  CheckpointPlacement placement;
  MemoryLayout layout;
  Precision precision = Precision::kFp32;
  bool cudnn = false;  // attention through cuDNN (MEGATRAIN_ATTENTION=cudnn), checked to have run
  bool docs = false;   // packed documents: every row holds documents of 1, 7, 12 and 20 tokens
  const char* family = nullptr;  // a family fixture's config (tests/fixtures/families) instead of tiny()
  // A mixture of experts' fixture (tests/fixtures/moe): its config and weights (their routing is
  // clear of near ties, so the two backends' rounding picks the same experts).
  const char* moe = nullptr;
  // bf16 uploads from the shadow, or converted from the masters into pinned staging per slot.
  Bf16Uploads uploads = Bf16Uploads::kShadow;
};

ModelConfig case_config(const Case& c) {
  if (c.moe) {
    auto m = load_model_config(testing_util::moe_fixture_dir(c.moe));
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return m.ok() ? m.value() : ModelConfig{};
  }
  ModelConfig cfg = c.family ? testing_util::family_config(c.family) : tiny(c.tied, c.qwen);
  // cuDNN refuses head_dim % 8 != 0 (the family fixtures' is 12): the weights are initialised
  // here, not read from the fixture, so a cuDNN case may widen the heads
  if (c.cudnn && cfg.head_dim % 8) cfg.head_dim = 16;
  return cfg;
}

// Positions of documents of 1, 7, 12, 20, 1, 7, ... tokens in every row of the batch.
std::vector<int32_t> packed_positions(size_t tokens, int T) {
  const int lengths[] = {1, 7, 12, 20};
  std::vector<int32_t> pos;
  for (size_t r = 0; r < tokens / size_t(T); ++r)
    for (int t = 0, d = 0, p = 0; t < T; ++t, ++p) {
      if (p == lengths[d % 4]) p = 0, ++d;
      pos.push_back(p);
    }
  return pos;
}
// Printed by name, so ctest's test names are stable (not the struct's bytes).
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<double> run(const Case& c, bool cuda, int steps) {
  const ModelConfig cfg = case_config(c);
  const TrainOptions opt = options(c.layout, c.precision);
  StreamingOptions so;
  so.placement = c.placement;
  so.bf16_uploads = c.uploads;
  std::unique_ptr<Backend> backend;
  const cudatest::AttentionKernelScope kernel(c.cudnn ? cuda::AttentionKernel::kCudnn : cuda::attention_kernel());
  const uint64_t cudnn_calls = cuda::cudnn_attention_calls();
  if (cuda) {
    CudaBackendOptions o;
    o.attention_workspace_bytes = cuda_attention_workspace_bytes(int(opt.micro_batch), int(opt.seq_len),
                                                                 cfg.num_heads, cfg.num_kv_heads, cfg.head_dim);
    auto b = make_cuda_backend(o);
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    if (!b.ok()) return {};
    backend = std::move(b).value();
  } else {
    backend = make_cpu_backend({});
  }
  Backend* raw = backend.get();
  auto ex = StreamingExecutor::create(cfg, opt, so, std::move(backend));
  EXPECT_TRUE(ex.ok()) << ex.status().to_string();
  if (!ex.ok()) return {};
  init_weights(cfg, (*ex)->store(), 3);
  if (c.moe) {
    EXPECT_TRUE(load_hf_weights(testing_util::moe_fixture_dir(c.moe), cfg, (*ex)->store()).ok());
  }
  auto src = make_synthetic_source({5, cfg.vocab_size, 32, 3});
  Batch b;
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    EXPECT_TRUE((*src)->next_batch(opt.global_batch, opt.seq_len, b).ok());
    if (s == 1) b.targets[5] = b.targets[17] = -1;
    if (c.docs) b.positions = packed_positions(b.inputs.size(), opt.seq_len);
    auto r = (*ex)->step(b);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (!r.ok()) return {};
    EXPECT_TRUE(raw->error().ok()) << raw->error().to_string();
    losses.push_back(r->loss);
    if (c.moe) losses.push_back(r->aux_loss);  // the load-balancing loss too
  }
  EXPECT_TRUE((*ex)->sync().ok());
  EXPECT_TRUE(raw->error().ok()) << raw->error().to_string();
  // 3 layers x 3 micro-batches x (forward, backward) per step at least: no call fell back.
  if (cuda && c.cudnn) {
    EXPECT_GE(cuda::cudnn_attention_calls() - cudnn_calls, uint64_t(steps) * cfg.num_layers * 3 * 2);
  }
  return losses;
}

class CudaStreaming : public ::testing::TestWithParam<Case> {};

TEST_P(CudaStreaming, LossesMatchCpuBackend) {
  MT_REQUIRE_CUDA();
  if (GetParam().cudnn) MT_REQUIRE_CUDNN_BUILD();
  const auto cpu = run(GetParam(), false, 5), gpu = run(GetParam(), true, 5);
  const size_t n = GetParam().moe ? 10u : 5u;  // an MoE's aux losses follow its losses
  ASSERT_EQ(cpu.size(), n);
  ASSERT_EQ(gpu.size(), n);
  const bool bf16 = GetParam().precision == Precision::kBf16;
  const double rtol = GetParam().cudnn ? 2e-3 : bf16 && GetParam().moe ? 3e-3 : bf16 ? 5e-4 : 1e-4;  // the header
  const double aux_rtol = GetParam().cudnn && GetParam().moe ? 1.5e-2 : rtol;  // the header, too
  for (size_t i = 0; i < cpu.size(); ++i) {
    const bool aux = GetParam().moe && i % 2 == 1;
    EXPECT_NEAR(gpu[i], cpu[i], (aux ? aux_rtol : rtol) * std::fabs(cpu[i]))
        << (aux ? "aux loss, step " : "step ") << i / (GetParam().moe ? 2 : 1);
  }
  EXPECT_LT(gpu[GetParam().moe ? n - 2 : n - 1], gpu.front()) << "training lowers the loss";
}

TEST_P(CudaStreaming, SameRunTwiceIsBitIdentical) {
  MT_REQUIRE_CUDA();
  if (GetParam().cudnn) MT_REQUIRE_CUDNN_BUILD();
  const auto a = run(GetParam(), true, 4), b = run(GetParam(), true, 4);
  ASSERT_EQ(a.size(), GetParam().moe ? 8u : 4u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CudaStreaming,
    ::testing::Values(Case{"untied_device", false, false, CheckpointPlacement::kDevice, MemoryLayout::kExact},
                      Case{"tied_qwen_host_ckpt", true, true, CheckpointPlacement::kHost, MemoryLayout::kExact},
                      Case{"compact", false, true, CheckpointPlacement::kAuto, MemoryLayout::kCompact}),
    [](const auto& info) { return std::string(info.param.name); });

// bf16 compute (weights, activations, layer inputs; fp32 gradients and masters).
INSTANTIATE_TEST_SUITE_P(
    MixedPrecision, CudaStreaming,
    ::testing::Values(
        Case{"Bf16_untied_device", false, false, CheckpointPlacement::kDevice, MemoryLayout::kExact, Precision::kBf16},
        Case{"Bf16_tied_qwen_host_ckpt", true, true, CheckpointPlacement::kHost, MemoryLayout::kExact,
             Precision::kBf16},
        Case{"Bf16_compact", false, true, CheckpointPlacement::kAuto, MemoryLayout::kCompact, Precision::kBf16},
        Case{"Bf16_convert_uploads_host_ckpt", false, true, CheckpointPlacement::kHost, MemoryLayout::kExact,
             Precision::kBf16, false, false, nullptr, nullptr, Bf16Uploads::kConvert}),
    [](const auto& info) { return std::string(info.param.name); });

// bf16 with attention through cuDNN, one document per row and packed documents (ragged rows).
INSTANTIATE_TEST_SUITE_P(
    Cudnn, CudaStreaming,
    ::testing::Values(Case{"Cudnn_bf16_untied_device", false, false, CheckpointPlacement::kDevice, MemoryLayout::kExact,
                           Precision::kBf16, true, false},
                      Case{"Cudnn_bf16_documents_compact", false, true, CheckpointPlacement::kAuto,
                           MemoryLayout::kCompact, Precision::kBf16, true, true}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace mt

namespace mt {
namespace {
// The families' variants on the GPU (their fixture configs: sliding windows of 4 keys, q/k norms,
// post-norms, 1 + w, GeGLU, local RoPE, fused projections), fp32 and bf16, with documents.
INSTANTIATE_TEST_SUITE_P(
    Families, CudaStreaming,
    ::testing::Values(Case{"qwen3", true, false, CheckpointPlacement::kDevice, MemoryLayout::kExact, Precision::kFp32,
                           false, true, "qwen3"},
                      Case{"olmo2", false, false, CheckpointPlacement::kHost, MemoryLayout::kExact, Precision::kFp32,
                           false, false, "olmo2"},
                      Case{"gemma3_documents", true, false, CheckpointPlacement::kDevice, MemoryLayout::kExact,
                           Precision::kFp32, false, true, "gemma3"},
                      Case{"Bf16_qwen3", true, false, CheckpointPlacement::kDevice, MemoryLayout::kExact,
                           Precision::kBf16, false, false, "qwen3"},
                      Case{"Bf16_gemma3", true, false, CheckpointPlacement::kAuto, MemoryLayout::kExact,
                           Precision::kBf16, false, false, "gemma3"},
                      Case{"Bf16_phi3", false, false, CheckpointPlacement::kDevice, MemoryLayout::kExact,
                           Precision::kBf16, false, false, "phi3"},
                      // soft caps: cuDNN and the tensor-core kernel refuse them, the SIMT one runs
                      Case{"Bf16_gemma2_documents", true, false, CheckpointPlacement::kDevice, MemoryLayout::kExact,
                           Precision::kBf16, false, true, "gemma2"},
                      Case{"Cudnn_bf16_mistral_documents", false, false, CheckpointPlacement::kDevice,
                           MemoryLayout::kExact, Precision::kBf16, true, true, "mistral"},
                      // cuDNN with a window on every other layer and the 1/sqrt(20) score scale
                      Case{"Cudnn_bf16_gemma3_documents", true, false, CheckpointPlacement::kDevice,
                           MemoryLayout::kExact, Precision::kBf16, true, true, "gemma3"}),
    [](const auto& info) { return std::string(info.param.name); });
}  // namespace
}  // namespace mt

namespace mt {
namespace {
// Mixtures of experts on the GPU: the router, the expert sort and scatter, the experts streamed
// through their slots (only those with tokens), Qwen2-MoE's shared expert, gpt-oss's sinks and
// clamped SwiGLU; fp32 and bf16.
INSTANTIATE_TEST_SUITE_P(
    Moe, CudaStreaming,
    ::testing::Values(Case{"mixtral", false, false, CheckpointPlacement::kDevice, MemoryLayout::kExact, Precision::kFp32,
                           false, false, nullptr, "mixtral"},
                      Case{"qwen2_moe_host", false, false, CheckpointPlacement::kHost, MemoryLayout::kExact,
                           Precision::kFp32, false, false, nullptr, "qwen2_moe"},
                      Case{"qwen3_moe", true, false, CheckpointPlacement::kDevice, MemoryLayout::kExact,
                           Precision::kFp32, false, false, nullptr, "qwen3_moe"},
                      Case{"Bf16_qwen2_moe_host", false, false, CheckpointPlacement::kHost, MemoryLayout::kExact,
                           Precision::kBf16, false, false, nullptr, "qwen2_moe"},
                      Case{"Bf16_qwen3_moe", true, false, CheckpointPlacement::kDevice, MemoryLayout::kExact,
                           Precision::kBf16, false, false, nullptr, "qwen3_moe"},
                      Case{"gpt_oss", false, false, CheckpointPlacement::kDevice, MemoryLayout::kExact, Precision::kFp32,
                           false, false, nullptr, "gpt_oss"},
                      Case{"Bf16_gpt_oss_compact", false, false, CheckpointPlacement::kAuto, MemoryLayout::kCompact,
                           Precision::kBf16, false, false, nullptr, "gpt_oss"},
                      // cuDNN attention in the layer-major MoE schedule (this fixture's head_dim is 8,
                      // which cuDNN takes; the others' 12 it refuses)
                      Case{"Cudnn_bf16_qwen2_moe", false, false, CheckpointPlacement::kDevice, MemoryLayout::kExact,
                           Precision::kBf16, true, false, nullptr, "qwen2_moe"}),
    [](const auto& info) { return std::string(info.param.name); });
}  // namespace
}  // namespace mt

#include "engine/io/hf_layout.h"

#include <cmath>
#include <cstring>

namespace mt {

namespace {

// gpt-oss's stacked expert tensors of layer l: each names one tensor of every expert unit.
void add_stacked_experts(const ModelConfig& c, const std::vector<ParamSchema>& units, int l,
                         std::vector<HfTensor>& out) {
  const int64_t E = c.moe.num_experts, C = c.hidden_size, F = c.moe.expert_ffn;
  const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts.";
  struct Stacked {
    const char* name;
    std::vector<int64_t> shape;
    HfLayout layout;
    bool quantized;
  };
  std::vector<Stacked> stacked = {{"gate_up_proj", {E, C, 2 * F}, HfLayout::kGateUpInterleaved, c.moe.mxfp4},
                                  {"down_proj", {E, F, C}, HfLayout::kTransposed, c.moe.mxfp4}};
  if (c.moe.expert_bias) {
    stacked.insert(stacked.begin() + 1, {"gate_up_proj_bias", {E, 2 * F}, HfLayout::kBiasInterleaved, false});
    stacked.push_back({"down_proj_bias", {E, C}, HfLayout::kSame, false});
  }
  for (const Stacked& s : stacked) {
    HfTensor t{p + s.name, s.shape, {}, s.layout, s.quantized};
    for (int e = 0; e < E; ++e) {
      const size_t u = size_t(expert_unit(c, l, e));
      t.parts.emplace_back(u, units[u].find(p + std::to_string(e) + "." + s.name));
    }
    out.push_back(std::move(t));
  }
}

// Our gate/up matrix [2F, K] row r from the interleaved order's row: gate j is row 2j, up j 2j + 1.
size_t interleaved_row(size_t r, size_t F) { return r < F ? 2 * r : 2 * (r - F) + 1; }

}  // namespace

std::vector<HfTensor> hf_tensors(const ModelConfig& cfg, const std::vector<ParamSchema>& units) {
  std::vector<HfTensor> out;
  for (size_t u = 0; u < units.size(); ++u) {
    if (units[u].kind == UnitKind::kExpert && cfg.moe.names == MoeNames::kGptOss) {
      if (units[u].expert == 0) add_stacked_experts(cfg, units, units[u].layer, out);
      continue;
    }
    for (const TensorSpec& t : units[u].tensors) out.push_back({t.name, t.shape, {{u, &t}}, HfLayout::kSame, false});
  }
  return out;
}

void part_from_file(HfLayout layout, const TensorSpec& t, const float* file, float* ours) {
  const size_t R = size_t(t.shape[0]), K = t.shape.size() > 1 ? size_t(t.shape[1]) : 1, F = R / 2;
  switch (layout) {
    case HfLayout::kSame: std::memcpy(ours, file, t.numel * sizeof(float)); return;
    case HfLayout::kGateUpInterleaved:  // file [K, 2F]
      for (size_t r = 0; r < R; ++r)
        for (size_t k = 0; k < K; ++k) ours[r * K + k] = file[k * R + interleaved_row(r, F)];
      return;
    case HfLayout::kBiasInterleaved:
      for (size_t r = 0; r < R; ++r) ours[r] = file[interleaved_row(r, F)];
      return;
    case HfLayout::kTransposed:  // file [K, R]
      for (size_t r = 0; r < R; ++r)
        for (size_t k = 0; k < K; ++k) ours[r * K + k] = file[k * R + r];
      return;
  }
}

void part_to_file(HfLayout layout, const TensorSpec& t, const float* ours, float* file) {
  const size_t R = size_t(t.shape[0]), K = t.shape.size() > 1 ? size_t(t.shape[1]) : 1, F = R / 2;
  switch (layout) {
    case HfLayout::kSame: std::memcpy(file, ours, t.numel * sizeof(float)); return;
    case HfLayout::kGateUpInterleaved:
      for (size_t r = 0; r < R; ++r)
        for (size_t k = 0; k < K; ++k) file[k * R + interleaved_row(r, F)] = ours[r * K + k];
      return;
    case HfLayout::kBiasInterleaved:
      for (size_t r = 0; r < R; ++r) file[interleaved_row(r, F)] = ours[r];
      return;
    case HfLayout::kTransposed:
      for (size_t r = 0; r < R; ++r)
        for (size_t k = 0; k < K; ++k) file[k * R + r] = ours[r * K + k];
      return;
  }
}

void dequantize_mxfp4(const uint8_t* blocks, const uint8_t* scales, int64_t rows, int64_t cols, float* out) {
  static constexpr float kFp4[16] = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                                     -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  const int64_t groups = cols / 32;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const int exponent = int(scales[r * groups + g]) - 127;
      const uint8_t* b = blocks + (r * groups + g) * 16;
      float* o = out + r * cols + g * 32;
      for (int j = 0; j < 16; ++j) {
        o[2 * j] = std::ldexp(kFp4[b[j] & 0x0f], exponent);
        o[2 * j + 1] = std::ldexp(kFp4[b[j] >> 4], exponent);
      }
    }
}

void mxfp4_part_to_ours(HfLayout layout, const TensorSpec& t, const float* matrix, float* ours) {
  if (layout != HfLayout::kGateUpInterleaved) {  // down_proj's dequantized matrix is ours: [C, F]
    std::memcpy(ours, matrix, t.numel * sizeof(float));
    return;
  }
  const size_t R = size_t(t.shape[0]), K = size_t(t.shape[1]);
  for (size_t r = 0; r < R; ++r) std::memcpy(ours + r * K, matrix + interleaved_row(r, R / 2) * K, K * sizeof(float));
}

}  // namespace mt

// The Hugging Face form of a model's tensors (hf_io.h). A file tensor is one of our schema's
// tensors as it is — except gpt-oss's experts: its files stack a layer's experts in one tensor
// along a first dimension, each expert's part in transformers' layout (the matrices transposed,
// gate and up interleaved), and its hub checkpoints store them quantized as MXFP4 blocks and
// scales, which load dequantized into the fp32 masters (exports write them unquantized).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/model/param_schema.h"

namespace mt {

// How an expert's part sits in a stacked file tensor, given our tensor of [R, K] (or [R]):
//  kSame            as ours
//  kGateUpInterleaved ours [2F, K] = gate rows then up rows; the file's [K, 2F], column 2j gate
//                   row j, column 2j + 1 up row j
//  kBiasInterleaved ours [2F] = gate then up; the file's [2F] alternates them
//  kTransposed      ours [R, K]; the file's [K, R]
enum class HfLayout { kSame, kGateUpInterleaved, kBiasInterleaved, kTransposed };

struct HfTensor {
  std::string name;
  std::vector<int64_t> shape;  // in the file
  // The schema tensors it holds, in order: one, or one per expert (each a contiguous slice).
  std::vector<std::pair<size_t, const TensorSpec*>> parts;  // (unit, tensor)
  HfLayout layout = HfLayout::kSame;
  // On the hub: name + "_blocks" [parts, rows, cols / 32, 16] and name + "_scales" [parts, rows,
  // cols / 32] (uint8) hold each part's [rows, cols] matrix as transformers dequantizes it
  // (before its transpose: rows = the file shape's last dimension).
  bool mxfp4 = false;
  size_t part_numel() const { return parts.front().second->numel; }
};

// The model's tensors in its Hugging Face files; `units` are build_param_schemas(cfg), which
// the parts point into. With cfg.moe.mxfp4 the experts' matrices are the quantized form.
std::vector<HfTensor> hf_tensors(const ModelConfig& cfg, const std::vector<ParamSchema>& units);

// One part between the file's layout (file, part_numel elements) and ours (tensor t).
void part_from_file(HfLayout layout, const TensorSpec& t, const float* file, float* ours);
void part_to_file(HfLayout layout, const TensorSpec& t, const float* ours, float* file);

// One MXFP4 matrix [rows, cols] (cols a multiple of 32) from its blocks [rows, cols / 32, 16]
// (two FP4 e2m1 values a byte, the low nibble first) and scales [rows, cols / 32] (E8M0: 2^(s -
// 127)), as transformers' convert_moe_packed_tensors computes it.
void dequantize_mxfp4(const uint8_t* blocks, const uint8_t* scales, int64_t rows, int64_t cols, float* out);
// The dequantized matrix of a part into ours: a gate/up matrix's rows interleave gate and up.
void mxfp4_part_to_ours(HfLayout layout, const TensorSpec& t, const float* matrix, float* ours);

}  // namespace mt

// Safetensors files written and read by several threads at once (direct_io.h): the checkpoints'
// path. The bytes are exactly write_safetensors' (the same header, the tensors in order), and a
// read gives exactly read_f32's / read_bf16's; only who moves them, and how, differs.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "engine/io/direct_io.h"
#include "engine/io/safetensors.h"

namespace mt {

// Told, as a writer goes, how many of its tensors (the first ones, in order) it holds the bytes
// of: copied out of the memory they came from, which may change from then on. Called from the
// writer's threads one call at a time, with a count that only grows.
using TensorsCaptured = std::function<void(size_t tensors)>;

// write_safetensors' file, by write_file_parallel: each thread makes the pieces of the file it
// writes (header bytes, tensor bytes copied, or converted F32 <-> BF16). o.mode kStream, or a
// tensor made by `fill` (its contract: called in order), streams it with write_safetensors
// (`captured` then hears of every tensor once the file is written).
Status write_safetensors_parallel(const DirFd& dir, const std::string& name, const std::vector<WriteTensor>& tensors,
                                  const Metadata& metadata, const FileIoOptions& o, FileIoReport* report = nullptr,
                                  const TensorsCaptured& captured = nullptr);

// A tensor of an open file to read into dst as `dtype` (F32 or BF16: numel elements).
struct ReadTensor {
  const SafetensorsFile* file = nullptr;
  const TensorInfo* info = nullptr;
  void* dst = nullptr;
  DType dtype = DType::kF32;
};
// Reads each as read_f32 (dtype F32) or read_bf16 (BF16) would: a tensor stored in `dtype` is
// copied by read_pieces_parallel from its file; one that needs a conversion, or one of a file
// held in memory, is converted from the mapping, as is everything under o.mode kStream.
Status read_tensors_parallel(const std::vector<ReadTensor>& tensors, const FileIoOptions& o,
                             FileIoReport* report = nullptr);

}  // namespace mt

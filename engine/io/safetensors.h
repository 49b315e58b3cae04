// Safetensors files (https://github.com/huggingface/safetensors): an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, then
// the tensors' bytes. The reader memory-maps the file and validates every header field before
// any tensor byte is touched (lying headers get a clear error naming the file and tensor, never
// an out-of-bounds read); F32, BF16 and F16 convert to fp32 on read. The writer streams: header
// first, then each tensor from the caller's memory, converted in bounded chunks, so no second
// model-sized copy is ever held. Hugging Face sharded checkpoints (NAME.safetensors.index.json
// with a weight_map) are read and written. Also here: durable (fsynced) file writes, shared by
// checkpoints, HF export and token files. A file truncated while mapped is an error, not SIGBUS
// (mapped_file.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/base/dir_fd.h"
#include "engine/base/status.h"
#include "engine/io/mapped_file.h"
#include "kernels/bf16.h"

namespace mt {

// ---- files -------------------------------------------------------------------------------------

// Writes `bytes` to `path` (created or truncated, never through a symlink), fsyncs and closes
// it; every return checked. The DirFd form writes NAME in a directory held open.
Status write_file_durable(const std::string& path, const std::string& bytes);
Status write_file_durable(const DirFd& dir, const std::string& name, const std::string& bytes);
// fsyncs a directory so renames and creations inside it are durable.
Status fsync_dir(const std::string& dir);
// Replaces `path` whole or not at all: `bytes` written durably to `tmp` (in the same directory),
// renamed over `path`, the directory synced. A reader sees the old file or the new one, never a
// part; a failed rename removes `tmp`.
Status replace_file_durable(const std::string& path, const std::string& tmp, const std::string& bytes);

// ---- format ------------------------------------------------------------------------------------

enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool, kU16, kU32, kU64, kF8E4M3, kF8E5M2 };
const char* dtype_name(DType d);  // the header spelling: "F32", "BF16", ...
size_t dtype_size(DType d);
Result<DType> parse_dtype(const std::string& name);

constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;  // 100 MB, as the reference reader

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range relative to the start of the data section
  uint64_t numel() const;
};

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // header order
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;          // 8 + header length
  std::map<std::string, size_t> index;  // name -> position in tensors
  const TensorInfo* find(const std::string& name) const;
};

// Parses and validates the header of a whole safetensors file held in [data, data + size):
// offsets are checked against the data section, which tensors must cover exactly, without
// overlaps or gaps. `source` names the file in messages. Never reads outside the buffer.
Result<SafetensorsHeader> parse_safetensors(const uint8_t* data, size_t size, const std::string& source);

// Shape string "[2, 3]" for messages.
std::string shape_string(const std::vector<int64_t>& shape);

// ---- reading -----------------------------------------------------------------------------------

class SafetensorsFile {
 public:
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  // Parses a copy of an in-memory file (tests, fuzzing).
  static Result<std::unique_ptr<SafetensorsFile>> from_bytes(std::string bytes, const std::string& source);

  const std::string& path() const { return source_; }
  bool on_disk() const { return map_ != nullptr; }  // open()ed from path(), not from_bytes
  const SafetensorsHeader& header() const { return header_; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const TensorInfo* find(const std::string& name) const { return header_.find(name); }

  // The raw bytes: a caller reading them directly asks intact() when it is done.
  const uint8_t* bytes(const TensorInfo& t) const { return base_ + header_.data_start + t.begin; }
  // Ok unless the file shrank while mapped, so that what was read since open() is not its data.
  Status intact() const { return map_ ? map_->intact() : Status::Ok(); }
  // Zero-copy view of an F32 tensor when it is 4-byte aligned in the mapping, else nullptr.
  const float* f32_view(const TensorInfo& t) const;
  // Converts a tensor of F32, BF16 or F16 into `out` (t.numel() elements).
  Status read_f32(const TensorInfo& t, float* out) const;
  // Elements [first, first + n) of it (a slice of a stacked tensor).
  Status read_f32_range(const TensorInfo& t, uint64_t first, uint64_t n, float* out) const;
  // Converts into bf16 (round to nearest even from F32/F16; a BF16 tensor is copied exactly).
  Status read_bf16(const TensorInfo& t, bf16* out) const;

 private:
  SafetensorsFile() = default;
  std::unique_ptr<MappedFile> map_;
  std::string owned_;
  std::string source_;
  const uint8_t* base_ = nullptr;
  SafetensorsHeader header_;
};

// One safetensors file or a sharded set (DIR/NAME.safetensors.index.json naming its shards).
class SafetensorsSet {
 public:
  // `path` is a .safetensors file, an index .json, or a directory holding NAME.safetensors.index.json
  // or NAME.safetensors (the single file wins when both exist, as in transformers).
  static Result<std::unique_ptr<SafetensorsSet>> open(const std::string& path, const std::string& name = "model");

  struct Entry {
    const SafetensorsFile* file;
    const TensorInfo* info;
  };
  const std::vector<std::string>& names() const { return names_; }  // file order, shard by shard
  const Entry* find(const std::string& name) const;
  std::string describe() const;  // the file(s) it was read from

 private:
  Status add_file(std::unique_ptr<SafetensorsFile> f);
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Entry> entries_;
  std::vector<std::string> names_;
};

// ---- writing -----------------------------------------------------------------------------------

// One tensor to write: `numel` elements at `data` in `src` dtype (F32 or BF16), stored as `dtype`
// (F32 or BF16). Conversion happens on the fly in bounded chunks.
struct WriteTensor {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;
  const void* data = nullptr;
  DType src = DType::kF32;
  // Instead of data: produces elements [first, first + n) in fp32, called in order in bounded
  // chunks (a tensor assembled from others: gpt-oss's stacked experts).
  std::function<void(uint64_t first, size_t n, float* out)> fill = nullptr;
  // Instead of data: copies bytes [offset, offset + n) of the tensor as the file stores them
  // (dtype == src) into dst, from any thread (a tensor held on the NVMe tier's drives).
  std::function<Status(uint64_t offset, size_t n, void* dst)> read = nullptr;
};
using Metadata = std::map<std::string, std::string>;

// The bytes a safetensors file of `tensors` starts with: the 8-byte header length and the JSON
// header, padded with spaces so the data starts at a multiple of 8; the tensors checked first.
Result<std::string> safetensors_header(const std::vector<WriteTensor>& tensors, const Metadata& metadata = {});

// Streams a safetensors file to `path`; fsyncs and closes it, checking every call. On failure the
// partial file is removed.
Status write_safetensors(const std::string& path, const std::vector<WriteTensor>& tensors,
                         const Metadata& metadata = {});
Status write_safetensors(const DirFd& dir, const std::string& name, const std::vector<WriteTensor>& tensors,
                         const Metadata& metadata = {});

// Writes `tensors` in `dir` (held open: see DirFd) in shards of at most max_shard_bytes of tensor data each (a
// larger tensor gets a shard of its own; 0 = no limit). One shard is written as NAME.safetensors;
// several as NAME-0000i-of-0000n.safetensors plus NAME.safetensors.index.json in HF form
// {"metadata": {"total_size": N}, "weight_map": {...}}. Returns the file names written.
Result<std::vector<std::string>> write_sharded_safetensors(const DirFd& dir, const std::string& name,
                                                           const std::vector<WriteTensor>& tensors,
                                                           uint64_t max_shard_bytes, const Metadata& metadata = {});

// IEEE half to float.
float f16_to_float(uint16_t h);

}  // namespace mt

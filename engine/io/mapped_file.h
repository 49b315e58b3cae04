// A read-only memory map of a whole file that outlives the file being truncated under it.
//
// Reading a mapped page the file no longer has raises SIGBUS, which ends the process: for the
// daemon, every job on the node, because someone with write access to the data root truncated a
// token shard or a safetensors file while a job had it mapped. A process-wide SIGBUS handler
// (installed with the first mapping, chaining to the handler it replaces) recognises a fault inside
// a live mapping, marks the mapping torn and maps zeros from the faulting page to the mapping's end
// so the read completes. A file cut within its last page raises nothing (the kernel zeros that
// page's tail): intact() also finds that, by a byte it noted at open. Each reader asks intact()
// once it has read (a batch, a tensor) and fails with an error naming the file, so the zeros it
// read never leave it. A SIGBUS anywhere else takes the course it would have taken without this
// handler. Not covered: a file rewritten in place without shrinking (the reader reads what is there).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/base/status.h"

namespace mt {

// A whole file mapped read-only (an empty file maps to size 0, data nullptr).
class MappedFile {
 public:
  static Result<std::unique_ptr<MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Ok unless the file shrank since open() (or a page of it could not be read) so that a read may
  // have seen zeros: then DATA_LOSS naming the file, and what was read must be discarded.
  Status intact() const;
  // A fingerprint of the contents from 64 spread samples of 256 bytes and the size (hex): a file
  // rewritten in place at the same size tells itself apart in a data description without a
  // whole read; a copy of the same file does not.
  std::string sampled_fingerprint() const;

  // Mappings watched at once; open() refuses one more (Linux's default vm.max_map_count).
  static constexpr size_t kMaxMappings = 65536;

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int slot_ = -1;              // in the SIGBUS handler's table while mapped
  size_t tail_probe_ = SIZE_MAX;  // see last_nonzero_in_last_page (mapped_file.cc)
};

}  // namespace mt

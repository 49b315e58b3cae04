// Parallel file I/O for checkpoints: several threads write or read disjoint pieces of a file at
// their offsets (pwrite/pread), through buffers aligned to kDirectIoAlign, with O_DIRECT: the
// bytes go from those buffers to the disk without the page cache, so a write runs at the disk's
// bandwidth rather than the kernel's writeback's. A file is preallocated (fallocate) to its size
// first, so the threads overwrite blocks in place instead of extending the file one write at a
// time. The file's tail past its last whole block is written through the page cache (O_DIRECT
// wants whole blocks), then the file is fsynced as any other. Where O_DIRECT is refused (an open
// or a write answers EINVAL: some file systems) the same threads and pieces go through the page
// cache; the report says so, and the first such fallback is noted once per process.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/base/dir_fd.h"
#include "engine/base/status.h"

namespace mt {

constexpr size_t kDirectIoAlign = 4096;  // buffer addresses, file offsets and lengths of O_DIRECT

enum class FileIoMode {
  kDirect,    // parallel, O_DIRECT where the file system takes it (the default)
  kBuffered,  // parallel, through the page cache
  kStream,    // one thread: the streaming writer (write_safetensors) and the mmap reader, as before
};
const char* file_io_mode_name(FileIoMode m);
Result<FileIoMode> parse_file_io_mode(const std::string& name);

struct FileIoOptions {
  FileIoMode mode = FileIoMode::kDirect;
  int threads = 4;
  // One pwrite/pread; rounded up to kDirectIoAlign. 4 MiB: on a ~3 GB/s disk (2026-12-03, paired
  // runs) reads reach 0.77-0.80 of a dd-like baseline against 0.67-0.69 at 16 MiB, writes
  // 0.89-0.97 against 0.84-0.88 (docs/PERF.md).
  size_t chunk_bytes = size_t(4) << 20;
};

// What checkpoints use: MEGATRAIN_CHECKPOINT_IO (direct|buffered|stream) and
// MEGATRAIN_CHECKPOINT_THREADS, read at the first call; set_checkpoint_io_options replaces them
// for the whole process (the bench, tests).
FileIoOptions checkpoint_io_options();
void set_checkpoint_io_options(const FileIoOptions& o);

// What one parallel write or read did.
struct FileIoReport {
  bool direct = false;   // O_DIRECT carried the pieces (the tail of a write aside)
  int threads = 0;
  std::string fallback;  // why O_DIRECT was asked for and not used; "" otherwise
};

// Files written and read in parallel by this process so far, by the path that carried them.
struct FileIoCounters {
  uint64_t direct = 0, buffered = 0;
};
FileIoCounters file_io_counters();

// The first O_DIRECT fallback of this process, once (for the caller's log): "" before one and
// after it was taken. The fallback is also printed once on stderr.
std::string take_direct_io_notice();

// Makes bytes [offset, offset + n) of the file into `dst`; called from several threads at once,
// for disjoint ranges, in no particular order.
using FillBytes = std::function<void(uint64_t offset, size_t n, char* dst)>;

// Creates NAME in DIR (truncated, never through a symlink) holding `size` bytes made by `fill`,
// written by o.threads threads in o.chunk_bytes pieces; fsyncs and closes it, every call checked.
// A failure names the file and removes it.
Status write_file_parallel(const DirFd& dir, const std::string& name, uint64_t size, const FillBytes& fill,
                           const FileIoOptions& o, FileIoReport* report = nullptr);

// Bytes [offset, offset + size) of paths[file], to be copied to dst.
struct ReadPiece {
  size_t file = 0;
  uint64_t offset = 0, size = 0;
  void* dst = nullptr;
};
// Reads every piece: adjacent pieces of a file are read together, in o.chunk_bytes reads by
// o.threads threads, and copied out of the aligned buffers. Pieces lie within their files and
// those of one file do not overlap.
Status read_pieces_parallel(const std::vector<std::string>& paths, std::vector<ReadPiece> pieces,
                            const FileIoOptions& o, FileIoReport* report = nullptr);

// Tests only: faults injected into the calls above (and into write_safetensors' writes). Setting
// them also forgets the fallback notice, so the next fallback is noted again.
struct IoFaultsForTesting {
  int refuse_direct = 0;  // the errno every O_DIRECT open answers (EINVAL: a file system without it)
  // The errno a write of `path` at `offset` answers; 0: it goes through.
  std::function<int(const std::string& path, uint64_t offset)> write_error;
};
void set_io_faults_for_testing(IoFaultsForTesting f);
// The injected errno for a write of `path` at `offset` (0: none).
int injected_write_error(const std::string& path, uint64_t offset);

}  // namespace mt

// Bytes on disk under a directory: regular files, recursively, symlinks not followed; a file that
// vanishes while it is walked adds 0 (checkpoints are pruned and jobs deleted concurrently).
#pragma once
#include <cstdint>
#include <filesystem>

namespace mt {

uint64_t tree_bytes(const std::filesystem::path& dir);

}  // namespace mt

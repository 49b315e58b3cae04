// Job spec files for humans: YAML or JSON, read into the engine's JobSpec. Keys are the proto's
// snake_case field names; a misspelt key or a bad value is refused naming the key and value.
#pragma once
#include <cstddef>
#include <string>

#include "engine/job/job_spec.h"

namespace mt::cli {

// Bounds on a spec: a job spec is a few hundred bytes and a few dozen values, so these leave
// ample room while keeping a hostile file ("billion laughs" aliases, deep nesting, a huge file)
// from exhausting memory or the stack.
inline constexpr size_t kMaxSpecBytes = 1 << 20;  // 1 MiB
inline constexpr long kMaxSpecNodes = 10000;      // values, counting each use of an alias
inline constexpr int kMaxSpecDepth = 64;

// Parses YAML (or JSON, a subset of YAML) text into JSON.
Result<Json> spec_text_to_json(const std::string& text, const std::string& source);
// Reads a spec file (refusing one over kMaxSpecBytes) into JSON.
Result<Json> load_spec_json(const std::string& path);
Result<JobSpec> load_job_spec(const std::string& path);

}  // namespace mt::cli

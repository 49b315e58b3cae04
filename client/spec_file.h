// Job spec files for humans: YAML or JSON, read into the engine's JobSpec. Keys are the proto's
// snake_case field names; a misspelt key or a bad value is refused naming the key and value.
#pragma once
#include <string>

#include "engine/job/job_spec.h"

namespace mt::cli {

// Parses YAML (or JSON, a subset of YAML) text into JSON.
Result<Json> spec_text_to_json(const std::string& text, const std::string& source);
Result<JobSpec> load_job_spec(const std::string& path);

}  // namespace mt::cli

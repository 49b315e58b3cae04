// Wall-clock times as text: "2026-11-30T16:05:01.123Z" (RFC 3339, UTC, milliseconds), the form
// of the daemon's log lines and of `megatrain logs --since`.
#pragma once
#include <cstdint>
#include <string>

#include "engine/base/status.h"

namespace mt {

int64_t unix_ms_now();
std::string utc_time_text(int64_t unix_ms);
// "2026-11-30T16:05:01.123Z" or "2026-11-30T16:05:01Z" at the start of `text`; returns the
// time and sets *used to the characters read. INVALID_ARGUMENT when it does not start so.
Result<int64_t> parse_utc_time(const std::string& text, size_t* used = nullptr);

}  // namespace mt

// Sizes as people write them, one rule for the daemon's flags and the CLI's: a plain decimal
// number (an optional fraction, no sign, exponent or hex) and a unit, case ignored —
//   KiB MiB GiB TiB, and K M G T alone: powers of 1024 (as systemd, Docker and `free` read them);
//   KB MB GB TB: powers of 1000 (SI, as drives and the published system's "1.5 TB" are sold);
//   B or none: bytes.
// A size past 2^64 - 1 bytes is refused, never wrapped; a fraction of a byte is dropped.
#pragma once
#include <cstdint>
#include <string_view>

#include "engine/base/status.h"

namespace mt {

Result<uint64_t> parse_byte_size(std::string_view text);

}  // namespace mt

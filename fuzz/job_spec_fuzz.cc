// libFuzzer target: the job spec parser (JSON text -> mt::Json -> JobSpec + validation), the
// path every spec from a client or a file takes. It must reject bad input with a Status,
// never crash, hang or read out of bounds.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/job/job_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto j = mt::Json::parse(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!j.ok()) return 0;
  auto spec = mt::job_spec_from_json(*j);
  if (spec.ok()) {
    // A spec that parsed must survive its own round trip.
    auto again = mt::job_spec_from_json(mt::job_spec_to_json(*spec));
    if (!again.ok() || mt::job_spec_hash(*again) != mt::job_spec_hash(*spec)) __builtin_trap();
  }
  return 0;
}

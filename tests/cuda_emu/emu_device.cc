// The device the emulated CUDA tests see: always there (engine/backend/cuda/cuda_backend.h's
// probe, which the real backend answers from the driver).
#include <string>

#include "engine/backend/cuda/cuda_backend.h"

namespace mt {

bool cuda_available() { return true; }
std::string cuda_describe() { return "CUDA emulated on the CPU (tests/cuda_emu), no device"; }

}  // namespace mt

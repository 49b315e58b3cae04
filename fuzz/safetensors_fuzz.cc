// libFuzzer target: the safetensors header parser and the conversions it guards. Any input must
// give a Status (never a crash, leak or out-of-bounds read); a file that parses must convert
// every F32/BF16/F16 tensor without touching bytes outside the buffer.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = mt::SafetensorsFile::from_bytes(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  if (!file.ok()) return 0;
  std::vector<float> f32;
  std::vector<mt::bf16> b16;
  for (const auto& t : (*file)->tensors()) {
    if (t.numel() > size) __builtin_trap();  // offsets were validated against the buffer
    f32.resize(t.numel());
    b16.resize(t.numel());
    (void)(*file)->read_f32(t, f32.data());
    (void)(*file)->read_bf16(t, b16.data());
    (void)(*file)->f32_view(t);
  }
  return 0;
}

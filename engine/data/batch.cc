#include <algorithm>

#include "engine/data/data_source.h"

namespace mt {

long Batch::counted_targets() const {
  return long(std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t >= 0; }));
}

Status validate_batch(const Batch& b, int vocab) {
  const size_t n = size_t(b.num_seqs) * size_t(b.seq_len);
  if (b.inputs.size() != n || b.targets.size() != n)
    return invalid_argument("batch holds " + std::to_string(b.inputs.size()) + " inputs and " +
                            std::to_string(b.targets.size()) + " targets, expected " + std::to_string(n));
  for (size_t i = 0; i < n; ++i) {
    if (b.inputs[i] < 0 || b.inputs[i] >= vocab)
      return invalid_argument("token " + std::to_string(b.inputs[i]) + " at index " + std::to_string(i) +
                              " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    if (b.targets[i] >= vocab || b.targets[i] < -1)
      return invalid_argument("target " + std::to_string(b.targets[i]) + " at index " + std::to_string(i) +
                              " is outside [-1, " + std::to_string(vocab) + ")");
  }
  return check_positions(b);
}

}  // namespace mt

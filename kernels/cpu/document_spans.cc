// document_starts (kernels/attention.h): packed documents as spans, from their positions.
#include <algorithm>

#include "kernels/attention.h"

namespace mt {

std::vector<int32_t> document_starts(const int32_t* pos, int B, int T) {
  if (!pos || B <= 0 || T <= 0) return {};
  std::vector<int32_t> starts;
  for (int b = 0; b < B; ++b) {
    const int32_t* p = pos + size_t(b) * size_t(T);
    int run = -1;  // the first visible key of the current document
    for (int t = 0; t < T; ++t) {
      const int first = int(std::clamp<int64_t>(int64_t(t) - p[t], 0, t));  // as the kernels mask
      if (first == run) continue;
      if (first != t) return {};  // sees keys before its predecessor's document, or not all of it
      starts.push_back(b * T + t);
      run = first;
    }
  }
  starts.push_back(B * T);
  return starts;
}

}  // namespace mt

#include "engine/base/disk_usage.h"

namespace mt {

namespace fs = std::filesystem;

uint64_t tree_bytes(const fs::path& dir) {
  std::error_code ec;
  uint64_t total = 0;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
       !ec && it != end; it.increment(ec)) {
    std::error_code fe;
    if (it->is_regular_file(fe) && !it->is_symlink(fe)) {
      const uint64_t n = it->file_size(fe);
      if (!fe) total += n;
    }
  }
  return total;
}

}  // namespace mt

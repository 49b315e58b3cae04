// A directory for the NVMe tier in tests: on a drive's filesystem (the tier refuses tmpfs, which
// /tmp may be), $MEGATRAIN_TEST_NVME_DIR or else the working directory (ctest's: the build tree).
#pragma once
#include <stdlib.h>

#include <filesystem>
#include <string>

namespace mt::testing_util {

struct NvmeDir {
  explicit NvmeDir(const std::string& tag = "nvme") {
    const char* root = getenv("MEGATRAIN_TEST_NVME_DIR");
    std::string tmpl = std::string(root && *root ? root : ".") + "/" + tag + "-XXXXXX";
    const char* made = mkdtemp(tmpl.data());
    if (made) path = std::filesystem::absolute(made).string();
  }
  ~NvmeDir() {
    if (!path.empty()) std::filesystem::remove_all(path);
  }
  NvmeDir(const NvmeDir&) = delete;
  NvmeDir& operator=(const NvmeDir&) = delete;
  std::string path;
};

}  // namespace mt::testing_util

// A fresh directory under /tmp for one test, removed with everything in it afterwards.
#pragma once
#include <stdlib.h>

#include <filesystem>
#include <string>

namespace mt::testing_util {

struct TempDir {
  explicit TempDir(const std::string& tag = "mt") {
    std::string tmpl = "/tmp/" + tag + "-XXXXXX";
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& f) const { return (std::filesystem::path(path) / f).string(); }
  std::string path;
};

}  // namespace mt::testing_util

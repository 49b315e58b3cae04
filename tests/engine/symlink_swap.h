// DIR/NAME flipped between a real directory and a symlink to OUTSIDE, atomically (renameat2
// RENAME_EXCHANGE with DIR/NAME.link), on a thread of its own until the object is destroyed: the
// race of a path that is checked and then used (issue 24.5).
#pragma once
#include <fcntl.h>
#include <stdio.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <thread>

namespace mt::testing_util {

class SymlinkSwap {
 public:
  SymlinkSwap(const std::string& dir, const std::string& name, const std::string& outside)
      : a_(dir + "/" + name), b_(dir + "/" + name + ".link") {
    std::filesystem::create_directories(a_);
    std::filesystem::create_directories(outside);
    std::filesystem::create_symlink(outside, b_);
    thread_ = std::thread([this] {
      while (!stop_)
        if (::renameat2(AT_FDCWD, a_.c_str(), AT_FDCWD, b_.c_str(), RENAME_EXCHANGE) == 0) ++flips_;
    });
  }
  ~SymlinkSwap() { stop(); }
  long stop() {  // the number of flips
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return flips_;
  }
  // The real directory, wherever it is now (after stop()).
  std::string real_dir() const { return std::filesystem::is_symlink(a_) ? b_ : a_; }

 private:
  std::string a_, b_;
  std::atomic<bool> stop_{false};
  std::atomic<long> flips_{0};
  std::thread thread_;
};

}  // namespace mt::testing_util

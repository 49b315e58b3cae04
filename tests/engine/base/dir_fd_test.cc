// DirFd: a path beneath a root opened without following any symlink, and files written through
// the descriptor, with a directory of the path swapped for a symlink to the outside while it runs
// (issue 24.5: the check-then-use race of ExportModel).
#include "engine/base/dir_fd.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "engine/base/json.h"
#include "engine/io/safetensors.h"
#include "tests/engine/symlink_swap.h"
#include "tests/engine/temp_dir.h"

namespace mt {
namespace {

namespace fs = std::filesystem;
using testing_util::SymlinkSwap;
using testing_util::TempDir;

TEST(DirFd, OpensBeneathTheRootCreatingAndRefusesSymlinksAtAnyComponent) {
  TempDir t;
  const std::string root = t / "root", outside = t / "outside";
  fs::create_directories(root + "/a");
  fs::create_directories(outside);
  fs::create_symlink(outside, root + "/a/link");
  fs::create_symlink(outside, root + "/top");
  std::ofstream(root + "/file") << "x";

  auto made = DirFd::open_beneath(root, "a/b/c", true);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  EXPECT_EQ(made->path(), root + "/a/b/c");
  EXPECT_TRUE(fs::is_directory(root + "/a/b/c"));
  ASSERT_TRUE(write_file_durable(*made, "x.json", "{}\n").ok());
  EXPECT_TRUE(made->has("x.json"));
  EXPECT_EQ(made->file_bytes(), 3u);
  ASSERT_TRUE(made->remove("x.json").ok());
  EXPECT_FALSE(fs::exists(root + "/a/b/c/x.json"));

  for (const char* rel : {"a/link", "a/link/new", "top", "top/x/y"}) {
    auto r = DirFd::open_beneath(root, rel, true);
    ASSERT_FALSE(r.ok()) << rel;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << rel;
    EXPECT_NE(r.status().message().find("is a symlink"), std::string::npos) << r.status().message();
  }
  EXPECT_TRUE(fs::is_empty(outside));
  EXPECT_EQ(DirFd::open_beneath(root, "a/../../outside", true).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DirFd::open_beneath(root, "/etc", false).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DirFd::open_beneath(root, "file", false).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(DirFd::open_beneath(root, "missing", false).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(DirFd::open_beneath(root + "/top", "x", true).status().code(), StatusCode::kInvalidArgument)
      << "a root that is a symlink";
}

// A file named like the output but planted as a symlink is replaced, never written through.
TEST(DirFd, AFilePlantedAsASymlinkIsNotWrittenThrough) {
  TempDir t;
  const std::string dir = t / "out", victim = t / "victim";
  fs::create_directories(dir);
  std::ofstream(victim) << "precious";
  fs::create_symlink(victim, dir + "/config.json");
  auto d = DirFd::open(dir, false);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(write_file_durable(*d, "config.json", "{}").ok());
  auto kept = read_file(victim);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(*kept, "precious");
}

// ROOT/swap flips between a real directory and a symlink to OUTSIDE (renameat2 RENAME_EXCHANGE:
// atomic) while the main thread opens ROOT/swap/tN and writes two files through it, as an
// export does. Whatever each open sees, nothing lands outside; every write that succeeded is in
// the real directory. Bounded in count and in time.
TEST(DirFd, NothingIsWrittenOutsideTheRootWhileADirectoryIsSwappedForASymlink) {
  TempDir t;
  const std::string root = t / "root", outside = t / "outside";
  SymlinkSwap swap(root, "swap", outside);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int opened = 0, refused = 0;
  for (int i = 0; i < 3000 && std::chrono::steady_clock::now() < end; ++i) {
    auto d = DirFd::open_beneath(root, "swap/t" + std::to_string(i), true);
    if (!d.ok()) {
      ++refused;
      EXPECT_NE(d.status().message().find("symlink"), std::string::npos) << d.status().message();
      continue;
    }
    ++opened;
    EXPECT_TRUE(write_file_durable(*d, "config.json", "{}\n").ok());
    EXPECT_TRUE(write_file_durable(*d, "model.safetensors", "weights").ok());
  }
  EXPECT_GT(swap.stop(), 10) << "the swap did not race";
  EXPECT_TRUE(fs::is_empty(outside)) << "written outside the root";
  EXPECT_GT(opened, 0);
  RecordProperty("opened", opened);
  RecordProperty("refused", refused);
  int found = 0;  // every directory created holds the files, wherever the real one now is
  for (const auto& e : fs::directory_iterator(swap.real_dir())) found += fs::exists(e.path() / "config.json");
  EXPECT_EQ(found, opened);
}

}  // namespace
}  // namespace mt

// confined_open: once roots are named, no open of a path inside one leaves it, whatever symlinks
// lie below it or are swapped in while it is being opened; paths outside the roots, and no roots
// at all, open as plain open(2).
#include "engine/base/confined_open.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "engine/base/dir_fd.h"
#include "engine/base/json.h"
#include "engine/io/safetensors.h"
#include "tests/engine/symlink_swap.h"
#include "tests/engine/temp_dir.h"

namespace mt {
namespace {

namespace fs = std::filesystem;
using testing_util::SymlinkSwap;
using testing_util::TempDir;

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// Names the roots for one test and ends the confinement after it.
struct Confined {
  explicit Confined(const std::vector<std::string>& roots) { EXPECT_TRUE(confine_opens_to(roots).ok()); }
  ~Confined() { EXPECT_TRUE(confine_opens_to({}).ok()); }
};

struct Tree {
  TempDir tmp{"confined"};
  std::string root = tmp / "root", outside = tmp / "outside";
  Tree() {
    fs::create_directories(root + "/real");
    fs::create_directories(outside);
    write(root + "/real/x", "inside");
    write(outside + "/x", "outside");
    fs::create_symlink("../outside/x", root + "/relative_escape");      // relative, leaves the root
    fs::create_symlink(outside + "/x", root + "/absolute_escape");      // absolute, leaves the root
    fs::create_symlink(root + "/real/x", root + "/absolute_inside");    // absolute, stays inside
    fs::create_symlink("real/x", root + "/relative_inside");            // relative, stays inside
    fs::create_directory_symlink(outside, root + "/dir_escape");        // a directory above the file
  }
};

std::string read_or_error(const std::string& path) {
  auto r = read_file(path);
  return r.ok() ? *r : "error: " + r.status().message();
}

TEST(ConfinedOpen, APathInsideARootNeverLeadsOutsideIt) {
  Tree t;
  Confined c({t.root});
  EXPECT_EQ(read_or_error(t.root + "/real/x"), "inside");
  EXPECT_EQ(read_or_error(t.root + "/absolute_inside"), "inside");
  EXPECT_EQ(read_or_error(t.root + "/relative_inside"), "inside");
  for (const char* name : {"/relative_escape", "/absolute_escape", "/dir_escape/x"}) {
    const std::string path = t.root + name;
    errno = 0;
    EXPECT_EQ(open_confined(path, O_RDONLY | O_CLOEXEC), -1) << path;
    EXPECT_EQ(errno, EXDEV) << path;
    auto r = read_file(path);
    ASSERT_FALSE(r.ok()) << path << " read '" << *r << "'";
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("outside the allowed roots"), std::string::npos) << r.status().message();
    auto m = MappedFile::open(path);
    EXPECT_FALSE(m.ok()) << path;
  }
  EXPECT_FALSE(DirFd::open(t.root + "/dir_escape", false).ok());
  // A file created through a directory that leads outside is refused and not created there.
  EXPECT_EQ(open_confined(t.root + "/dir_escape/new", O_WRONLY | O_CREAT | O_CLOEXEC, 0644), -1);
  EXPECT_FALSE(fs::exists(t.outside + "/new"));
  // An unnamed scratch file (the NVMe tier's) in a directory that leads outside: refused too.
  EXPECT_EQ(open_confined(t.root + "/dir_escape", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600), -1);
  // Outside every root, an open is a plain open.
  EXPECT_EQ(read_or_error(t.outside + "/x"), "outside");
  // A missing file is NOT_FOUND naming it.
  auto missing = read_file(t.root + "/none");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(ConfinedOpen, WithoutRootsEveryPathOpensAsGiven) {
  Tree t;
  EXPECT_EQ(read_or_error(t.root + "/relative_escape"), "outside");
  {
    Confined c({t.root});
    EXPECT_NE(read_or_error(t.root + "/relative_escape"), "outside");
  }
  EXPECT_EQ(read_or_error(t.root + "/dir_escape/x"), "outside");
  EXPECT_FALSE(confine_opens_to({t.tmp / "no-such-root"}).ok());
}

// The innermost root that holds a path is the one it must stay in: an NVMe root inside the data
// root does not let a path below it reach the rest of the data root.
TEST(ConfinedOpen, TheInnermostRootHolds) {
  Tree t;
  fs::create_directories(t.root + "/nvme");
  fs::create_symlink("../real/x", t.root + "/nvme/up");
  {
    Confined c({t.root});
    EXPECT_EQ(read_or_error(t.root + "/nvme/up"), "inside");
  }
  Confined c({t.root, t.root + "/nvme"});
  EXPECT_NE(read_or_error(t.root + "/nvme/up"), "inside");
}

// A root removed and made again while the daemon runs (an operator's rm -rf and mkdir, a volume
// mounted over it late) is the root used from then on: files below the new one open, and stay
// confined to it.
TEST(ConfinedOpen, ARootMadeAgainIsTheOneUsed) {
  Tree t;
  Confined c({t.root});
  fs::remove_all(t.root);
  EXPECT_EQ(read_file(t.root + "/real/x").status().code(), StatusCode::kNotFound);
  fs::create_directories(t.root);
  write(t.root + "/y", "new");
  fs::create_symlink("../outside/x", t.root + "/escape");
  EXPECT_EQ(read_or_error(t.root + "/y"), "new");
  EXPECT_NE(read_or_error(t.root + "/escape"), "outside");
}

// A directory flipped between itself and a symlink to outside while files below it are read:
// every read either refuses or reads the file inside, never the one outside.
TEST(ConfinedOpen, ADirectorySwappedWhileOpeningNeverReadsOutside) {
  Tree t;
  fs::create_directories(t.outside + "/d");
  write(t.outside + "/d/x", "outside");
  fs::create_directories(t.root + "/d");
  write(t.root + "/d/x", "inside");
  Confined c({t.root});
  SymlinkSwap swap(t.root, "d", t.outside + "/d");
  int inside = 0, refused = 0;
  for (int i = 0; i < 4000; ++i) {
    const std::string got = read_or_error(t.root + "/d/x");
    ASSERT_NE(got, "outside") << "read through the swapped symlink at try " << i;
    (got == "inside" ? inside : refused)++;
  }
  const long flips = swap.stop();
  EXPECT_GT(inside, 0);
  EXPECT_GT(flips, 0);
}

// A root inside another (an NVMe directory in the data root) was looked up by its name at each
// open: whoever may write in the outer root could rename it away and put a symlink to /etc in its
// place after the daemon's checks. It is now opened beneath the outer root, so the swap leads
// nowhere.
TEST(ConfinedOpen, ARootInsideAnotherSwappedForASymlinkLeadsNowhere) {
  Tree t;
  fs::create_directories(t.root + "/nvme");
  write(t.root + "/nvme/x", "nvme");
  Confined c({t.root, t.root + "/nvme"});
  EXPECT_EQ(read_or_error(t.root + "/nvme/x"), "nvme");
  fs::rename(t.root + "/nvme", t.root + "/nvme.orig");
  fs::create_directory_symlink(t.outside, t.root + "/nvme");
  errno = 0;
  EXPECT_EQ(open_confined(t.root + "/nvme/x", O_RDONLY | O_CLOEXEC), -1);
  EXPECT_EQ(errno, EXDEV);
  EXPECT_EQ(open_confined(t.root + "/nvme/made", O_WRONLY | O_CREAT | O_CLOEXEC, 0600), -1);
  EXPECT_FALSE(fs::exists(t.outside + "/made"));
  // An absolute symlink back inside the outer root is a directory inside it: that is allowed.
  fs::remove(t.root + "/nvme");
  fs::create_directory_symlink(t.root + "/nvme.orig", t.root + "/nvme");
  EXPECT_EQ(read_or_error(t.root + "/nvme/x"), "nvme");
}

// A symlink out of the root was opened and only then refused: through it a job could open a
// device with side effects, wait on a FIFO, or mount an automounted share. Now nothing outside is
// opened: a FIFO outside, opened for writing with no reader, would say ENXIO if it were.
TEST(ConfinedOpen, WhatASymlinkOutOfTheRootNamesIsNeverOpened) {
  Tree t;
  ASSERT_EQ(::mkfifo((t.outside + "/fifo").c_str(), 0600), 0);
  fs::create_symlink(t.outside + "/fifo", t.root + "/absolute_fifo");
  fs::create_symlink("../outside/fifo", t.root + "/relative_fifo");
  Confined c({t.root});
  for (const char* name : {"/absolute_fifo", "/relative_fifo", "/dir_escape/fifo"}) {
    errno = 0;
    EXPECT_EQ(open_confined(t.root + name, O_WRONLY | O_CLOEXEC), -1) << name;
    EXPECT_EQ(errno, EXDEV) << name << ": " << std::strerror(errno);
  }
}

// A FIFO where a file was expected held the job's thread in open(2) until a writer came (a cancel
// could not reach it): opens are non-blocking until they return, and a FIFO, device or socket
// below a root is refused (no spec names one).
TEST(ConfinedOpen, AFifoWhereAFileWasExpectedDoesNotBlock) {
  Tree t;
  ASSERT_EQ(::mkfifo((t.root + "/fifo").c_str(), 0600), 0);
  fs::create_symlink(t.root + "/fifo", t.root + "/absolute_to_fifo");  // the found-then-opened path
  Confined c({t.root});
  for (const char* name : {"/fifo", "/absolute_to_fifo"}) {
    auto opened = std::async(std::launch::async, [&] { return read_file(t.root + name).status(); });
    if (opened.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      const int unblock = ::open((t.root + "/fifo").c_str(), O_WRONLY);  // let the blocked open return
      ::close(unblock);
      FAIL() << name << ": the open waited for a writer";
    }
    const Status st = opened.get();
    EXPECT_NE(st.message().find("not a regular file or directory"), std::string::npos) << name << ": " << st.message();
  }
  // A socket (open(2) says ENXIO) is named the same way.
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sock_path = t.root + "/sock";
  ASSERT_LT(sock_path.size(), sizeof addr.sun_path);
  std::memcpy(addr.sun_path, sock_path.c_str(), sock_path.size() + 1);
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  const Status st = read_file(sock_path).status();
  EXPECT_NE(st.message().find("not a regular file or directory"), std::string::npos) << st.message();
  ::close(sock);
}

// An absolute symlink to a directory inside the root (RESOLVE_BENEATH refuses every absolute
// one) still takes a file created below it, in the directory it names; and a created file never
// follows a symlink at its own name.
// A file under a lease (a data root that Samba or knfsd also exports): the open waits for the
// lease to be given up, as open(2) does, instead of failing with EWOULDBLOCK because confined
// opens are non-blocking while they look for FIFOs.
TEST(ConfinedOpen, AFileUnderALeaseOpensOnceTheLeaseIsGivenUp) {
  Tree t;
  Confined c({t.root});
  const int holder = ::open((t.root + "/real/x").c_str(), O_RDONLY);
  ASSERT_GE(holder, 0);
  if (::fcntl(holder, F_SETLEASE, F_WRLCK) != 0) {
    ::close(holder);
    GTEST_SKIP() << "no lease here: " << std::strerror(errno);
  }
  struct sigaction ignore {}, before {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGIO, &ignore, &before);  // the break's notice to the holder, this process
  auto give_up = std::async(std::launch::async, [&] {
    for (int i = 0; i < 500 && ::fcntl(holder, F_GETLEASE) == F_WRLCK; ++i)  // until the break starts
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return ::fcntl(holder, F_SETLEASE, F_UNLCK);
  });
  EXPECT_EQ(read_or_error(t.root + "/real/x"), "inside");
  EXPECT_EQ(give_up.get(), 0);
  ::sigaction(SIGIO, &before, nullptr);
  ::close(holder);
}

TEST(ConfinedOpen, CreatingThroughAnAbsoluteSymlinkInsideTheRootWorks) {
  Tree t;
  fs::create_directory_symlink(t.root + "/real", t.root + "/absolute_dir");
  Confined c({t.root});
  const int fd = open_confined(t.root + "/absolute_dir/made", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  ::close(fd);
  EXPECT_TRUE(fs::exists(t.root + "/real/made"));
  const int tmp = open_confined(t.root + "/absolute_dir", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  EXPECT_GE(tmp, 0) << std::strerror(errno);
  if (tmp >= 0) ::close(tmp);
  fs::create_symlink(t.outside + "/made_outside", t.root + "/real/link");
  EXPECT_EQ(open_confined(t.root + "/absolute_dir/link", O_WRONLY | O_CREAT | O_CLOEXEC, 0600), -1);
  EXPECT_FALSE(fs::exists(t.outside + "/made_outside"));
}

}  // namespace
}  // namespace mt

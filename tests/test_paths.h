// Where a test binary finds the source tree (fixtures, the README) and the binaries it runs.
// Defined per test binary in one file CMake generates (megatrain_test_paths in
// tests/CMakeLists.txt), not by compile definitions: an absolute path on every object's command
// line made ccache miss all of them in a checkout at another path (CI's fresh clone).
#pragma once
#include <cstdlib>
#include <string>

namespace mt::testing_util {

const char* source_dir();       // the source tree the tests were built from
const char* megatrain_cli();    // the megatrain binary (mt_cli_tests only)
const char* megatraind();       // the megatraind binary (mt_cli_tests only)
const char* megatrain_bench();  // the megatrain-bench binary (mt_cli_tests only)

// Where the fixtures are: source_dir(), or $MEGATRAIN_SOURCE_DIR (binaries built on one machine
// and run on another: scripts/gpu_check.sh sets it).
inline std::string fixture_source_dir() {
  const char* env = std::getenv("MEGATRAIN_SOURCE_DIR");
  return env && *env ? env : source_dir();
}

}  // namespace mt::testing_util

// parse_byte_size: the one rule for sizes the daemon's flags and the CLI read — binary for
// K/M/G/T and KiB..TiB, SI for KB..TB, plain decimal digits only, nothing past 2^64 - 1.
#include "engine/base/byte_size.h"

#include <gtest/gtest.h>

namespace mt {
namespace {

TEST(ByteSize, UnitsByTheirWrittenForm) {
  const std::pair<const char*, uint64_t> good[] = {
      {"0", 0},
      {"4096", 4096},
      {"4096B", 4096},
      {"1K", 1024},
      {"1KiB", 1024},
      {"1KB", 1000},
      {"512M", 512ull << 20},
      {"512mib", 512ull << 20},
      {"512MB", 512'000'000},
      {"64G", 64ull << 30},
      {"64g", 64ull << 30},
      {"139GiB", 139ull << 30},
      {"140GB", 140'000'000'000},
      {"1.5TiB", 3ull << 39},
      {"1.5TB", 1'500'000'000'000},
      {"768GB", 768'000'000'000},
      {".5K", 512},
      {"1.", 1},
      {"0.0001K", 0},  // a fraction of a byte is dropped
      {"1.0000000000000000000000000001GiB", 1ull << 30},
      {"18446744073709551615", ~uint64_t{0}},
      {"16777215.99999999T", 18446744073709540620ull},
  };
  for (const auto& [text, bytes] : good) {
    auto r = parse_byte_size(text);
    ASSERT_TRUE(r.ok()) << text << ": " << r.status().message();
    EXPECT_EQ(*r, bytes) << text;
  }
}

TEST(ByteSize, AnythingElseIsRefusedNamingTheText) {
  for (const char* text : {"", "G", ".", "-1", "+1", " 1", "1 ", "1 G", "0x10", "1e3", "1e3GB", "inf", "nan",
                           "12Q", "1GG", "1GiBB", "1Gi B", "1P", "1bit", "1,5G", "1.5.G"}) {
    auto r = parse_byte_size(text);
    ASSERT_FALSE(r.ok()) << "'" << text << "' read as " << *r;
    EXPECT_NE(r.status().message().find("'" + std::string(text) + "'"), std::string::npos) << r.status().message();
  }
}

TEST(ByteSize, PastTwoToTheSixtyFourIsRefusedNeverWrapped) {
  for (const char* text : {"18446744073709551616", "16777216T", "16777216TiB", "18446744073709552KB",
                           "99999999999999999999999999999999", "18446744073709.551616MB"}) {
    auto r = parse_byte_size(text);
    ASSERT_FALSE(r.ok()) << text << " read as " << *r;
  }
  EXPECT_NE(parse_byte_size("16777216T").status().message().find("2^64"), std::string::npos);
}

}  // namespace
}  // namespace mt

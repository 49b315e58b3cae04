// Numbers (and strings) from untrusted text: JSON/YAML number parsing never clamps or wraps, and the checked
// size arithmetic reports overflow.
#include <gtest/gtest.h>

#include "engine/base/address.h"
#include "engine/base/checked_math.h"
#include "engine/base/json.h"

namespace mt {
namespace {

TEST(JsonNumbers, IntegersBeyondInt64AreDoublesNotClamped) {
  auto big = Json::parse_number("99999999999999999999");
  ASSERT_TRUE(big.ok());
  EXPECT_FALSE(big->is_integer());
  EXPECT_EQ(big->as_double(), 1e20);
  auto max = Json::parse("9223372036854775807");  // 19 digits: still an exact integer
  ASSERT_TRUE(max.ok());
  EXPECT_TRUE(max->is_integer());
  EXPECT_EQ(max->as_int(), INT64_MAX);
}

TEST(JsonNumbers, OverflowingDoubleIsRefused) {
  auto inf = Json::parse_number("1e999");
  EXPECT_EQ(inf.status().code(), StatusCode::kOutOfRange);
  auto doc = Json::parse(R"({"eps": 1e999})");
  ASSERT_FALSE(doc.ok());
  EXPECT_NE(doc.status().message().find("1e999"), std::string::npos) << doc.status().message();
  EXPECT_EQ(Json::parse_number("1e-999")->as_double(), 0.0);  // underflow is harmless
  EXPECT_EQ(Json::parse_number("nan").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Json::parse_number("inf").status().code(), StatusCode::kInvalidArgument);
}

// A high surrogate followed by an escape that is not its pair: both characters are kept (the
// second escape was read as a would-be pair and dropped, so "\ud800\u0041BC" lost its "A").
TEST(JsonStrings, AnUnpairedSurrogateKeepsTheEscapeAfterIt) {
  auto j = Json::parse(R"(["\ud800\u0041BC", "\ud83d\ude00", "\ud800\ud83d\ude00"])");
  ASSERT_TRUE(j.ok()) << j.status().to_string();
  EXPECT_EQ(j->items()[0].as_string(), "\xED\xA0\x80" "ABC");
  EXPECT_EQ(j->items()[1].as_string(), "\xF0\x9F\x98\x80") << "a pair is one character";
  EXPECT_EQ(j->items()[2].as_string(), "\xED\xA0\x80" "\xF0\x9F\x98\x80") << "a pair after a lone one";
}

TEST(CheckedMath, MultiplyReportsOverflow) {
  EXPECT_EQ(checked_mul(1ull << 31, 1ull << 32), 1ull << 63);
  EXPECT_FALSE(checked_mul(1ull << 32, 1ull << 32).has_value());
  EXPECT_EQ(sat_mul(1ull << 30, 1ull << 30, 1ull << 30), kSaturated);
  EXPECT_EQ(sat_mul(kSaturated, 0), kSaturated);  // an overflow stays one
  EXPECT_EQ(sat_add(kSaturated - 1, 2), kSaturated);
}

TEST(HostPort, PortsAndHostsAreChecked) {
  EXPECT_EQ(parse_host_port("--listen", "127.0.0.1:50051")->port, 50051);
  EXPECT_EQ(parse_host_port("--listen", "[::1]:1")->host, "::1");
  EXPECT_TRUE(parse_host_port("--listen", "127.0.0.1:0", 0).ok());
  for (const char* bad : {"127.0.0.1:99999", "127.0.0.1:0", "127.0.0.1:-1", "127.0.0.1:http", "127.0.0.1:",
                          ":50051", "127.0.0.1", "::1:50051", "127.0.0.1:+80"}) {
    auto r = parse_host_port("--server", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--server = '" + std::string(bad) + "'"), std::string::npos)
        << r.status().message();
  }
  EXPECT_NE(parse_host_port("--listen", "127.0.0.1:99999", 0).status().message().find("not in 0..65535"),
            std::string::npos);
}

}  // namespace
}  // namespace mt

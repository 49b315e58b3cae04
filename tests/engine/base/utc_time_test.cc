// The log lines' time format: written and read back to the millisecond; malformed text refused.
#include "engine/base/utc_time.h"

#include <gtest/gtest.h>

namespace mt {
namespace {

TEST(UtcTime, RoundTripsToTheMillisecond) {
  for (int64_t ms : {int64_t(0), int64_t(1796054701123), int64_t(1796054701000), unix_ms_now()}) {
    const std::string text = utc_time_text(ms);
    size_t used = 0;
    auto back = parse_utc_time(text + " rest", &used);
    ASSERT_TRUE(back.ok()) << text;
    EXPECT_EQ(*back, ms) << text;
    EXPECT_EQ(used, text.size());
  }
  EXPECT_EQ(utc_time_text(1796054701123), "2026-11-30T16:05:01.123Z");
  EXPECT_EQ(parse_utc_time("2026-11-30T16:05:01Z").value(), 1796054701000);
  EXPECT_EQ(parse_utc_time("2026-11-30T16:05:01.5Z").value(), 1796054701500);
}

TEST(UtcTime, RefusesWhatIsNotOne) {
  for (const char* bad : {"", "yesterday", "2026-11-30", "2026-11-30T16:05:01", "2026-13-30T16:05:01Z",
                          "2026-11-30T25:05:01Z", "1969-12-31T23:59:59Z", "2026-11-30T16:05:01.Z"})
    EXPECT_FALSE(parse_utc_time(bad).ok()) << bad;
}

}  // namespace
}  // namespace mt

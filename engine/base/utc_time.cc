#include "engine/base/utc_time.h"

#include <chrono>
#include <cstdio>
#include <ctime>

namespace mt {

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string utc_time_text(int64_t unix_ms) {
  const time_t s = time_t(unix_ms / 1000);
  tm t{};
  gmtime_r(&s, &t);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", t.tm_year + 1900, t.tm_mon + 1, t.tm_mday,
                t.tm_hour, t.tm_min, t.tm_sec, int(unix_ms % 1000));
  return buf;
}

Result<int64_t> parse_utc_time(const std::string& text, size_t* used) {
  int y, mo, d, h, mi, s, ms = 0, n = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &s, &n) != 6 || n == 0)
    return invalid_argument("'" + text.substr(0, 40) + "' is not a UTC time like 2026-11-30T16:05:01Z");
  size_t at = size_t(n);
  if (at < text.size() && text[at] == '.') {
    int k = 0;
    if (std::sscanf(text.c_str() + at, ".%3d%n", &ms, &k) != 1) return invalid_argument("'" + text + "': bad fraction");
    for (int digits = k - 1; digits < 3; ++digits) ms *= 10;
    at += size_t(k);
  }
  if (at >= text.size() || text[at] != 'Z')
    return invalid_argument("'" + text.substr(0, 40) + "' is not a UTC time (it must end in Z)");
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60 || y < 1970)
    return invalid_argument("'" + text.substr(0, 40) + "' is not a valid time");
  tm t{};
  t.tm_year = y - 1900;
  t.tm_mon = mo - 1;
  t.tm_mday = d;
  t.tm_hour = h;
  t.tm_min = mi;
  t.tm_sec = s;
  if (used) *used = at + 1;
  return int64_t(timegm(&t)) * 1000 + ms;
}

}  // namespace mt

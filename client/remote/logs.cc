// logs ID [-f] [--tail N] [--since T]: a job's log (or the daemon's: ID "daemon") over StreamLogs.
#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "client/remote/commands.h"
#include "engine/base/utc_time.h"

namespace mt::cli {

namespace {

// --since: a UTC time (2026-11-30T16:05:01Z), a duration ago (90s, 10m, 2h, 1d) or unix ms.
Result<int64_t> parse_since(const std::string& text) {
  if (text.find('T') != std::string::npos) {
    size_t used = 0;
    MT_ASSIGN_OR_RETURN(int64_t t, parse_utc_time(text, &used));
    if (used != text.size()) return invalid_argument("--since = '" + text + "' has text after the time");
    return t;
  }
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const std::string unit = end ? std::string(end) : "";
  if (end == text.c_str() || !(v >= 0) || v > 1e15)
    return invalid_argument("--since = '" + text + "': use a UTC time (2026-11-30T16:05:01Z), 10m, 2h, 1d or unix ms");
  const double per = unit == "s" ? 1e3 : unit == "m" ? 60e3 : unit == "h" ? 3600e3 : unit == "d" ? 86400e3 : 0;
  if (unit.empty()) return int64_t(v);  // unix milliseconds
  if (per == 0) return invalid_argument("--since = '" + text + "': the unit must be s, m, h or d");
  return unix_ms_now() - int64_t(v * per);
}

}  // namespace

int remote_logs(Connection& c, const Args& a) {
  std::vector<std::string> ids;
  bool follow = a.has("follow");
  for (const auto& p : a.positional()) {
    if (p == "-f") follow = true;
    else ids.push_back(p);
  }
  if (ids.size() != 1) return usage_error("logs");
  v1::StreamLogsRequest req;
  req.set_job_id(ids[0]);
  req.set_follow(follow);
  if (a.has("tail")) {
    auto n = a.number("tail", 0);
    if (!n.ok() || *n < 1 || *n > 1e12 || *n != double(int64_t(*n)))
      return fail(kUsage, "--tail = '" + a.get("tail") + "' is not a positive whole number of lines");
    req.set_tail_lines(int64_t(*n));
  }
  if (a.has("since")) {
    auto t = parse_since(a.get("since"));
    if (!t.ok()) return fail(kUsage, t.status().message());
    req.set_since_unix_ms(*t);
  }
  auto ctx = c.context(follow ? 0 : 60);
  auto reader = c.stub().StreamLogs(ctx.get(), req);
  v1::StreamLogsResponse msg;
  while (reader->Read(&msg)) {
    for (const v1::LogLine& l : msg.lines()) {
      if (a.json())
        print_json(Json::object({{"unix_ms", l.unix_ms()}, {"level", l.level()}, {"text", l.text()}}));
      else if (l.unix_ms() > 0)
        std::printf("%s %s %s\n", utc_time_text(l.unix_ms()).c_str(), l.level().c_str(), l.text().c_str());
      else
        std::printf("%s\n", l.text().c_str());
    }
    std::fflush(stdout);
  }
  if (grpc::Status s = reader->Finish(); !s.ok()) return c.fail(s, "logs " + ids[0]);
  return kOk;
}

}  // namespace mt::cli

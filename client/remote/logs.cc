// logs ID [-f] [--tail N] [--since T]: a job's log (or the daemon's: ID "daemon") over StreamLogs.
#include <algorithm>
#include <cstdio>

#include "client/remote/commands.h"
#include "engine/base/utc_time.h"

namespace mt::cli {

namespace {

// --since: a UTC time (2026-11-30T16:05:01Z), a whole duration ago (90s, 10m, 2h, 1d) or unix ms,
// each as strict decimal digits. A time before 1970 (36500d) means from the beginning.
Result<int64_t> parse_since(const std::string& text) {
  if (text.find('T') != std::string::npos) {
    size_t used = 0;
    MT_ASSIGN_OR_RETURN(int64_t t, parse_utc_time(text, &used));
    if (used != text.size()) return invalid_argument("--since = '" + text + "' has text after the time");
    return std::max<int64_t>(t, 0);
  }
  const size_t digits = size_t(std::find_if(text.begin(), text.end(), [](char c) { return c < '0' || c > '9'; }) - text.begin());
  const std::string unit = text.substr(digits);
  const int64_t per = unit.empty() ? 1 : unit == "s" ? 1000 : unit == "m" ? 60000 : unit == "h" ? 3600000 : unit == "d" ? 86400000 : 0;
  if (digits == 0 || digits > 15 || per == 0)
    return invalid_argument("--since = '" + text + "': use a UTC time (2026-11-30T16:05:01Z), a whole number of "
                            "s, m, h or d ago (10m, 2h, 1d), or unix milliseconds");
  const int64_t v = std::stoll(text.substr(0, digits));  // at most 15 digits: fits
  if (unit.empty()) return v;
  const int64_t now = unix_ms_now();
  return v > now / per ? 0 : now - v * per;
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
    auto n = a.integer("tail", 0, 1, 1000000000000);
    if (!n.ok()) return fail(kUsage, n.status().message());
    req.set_tail_lines(*n);
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

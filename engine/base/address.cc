#include "engine/base/address.h"

#include <charconv>

namespace mt {

Result<HostPort> parse_host_port(const std::string& flag, const std::string& address, int min_port) {
  auto bad = [&](const std::string& why) {
    return invalid_argument(flag + " = '" + address + "': " + why + " (expected HOST:PORT, e.g. 127.0.0.1:50051)");
  };
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return bad("no port");
  HostPort hp;
  hp.host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (hp.host.size() >= 2 && hp.host.front() == '[' && hp.host.back() == ']') {
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  } else if (hp.host.find(':') != std::string::npos) {
    return bad("an IPv6 address needs brackets, as in [::1]:50051");
  }
  if (hp.host.empty()) return bad("no host");
  for (char c : hp.host)
    if (c == ' ' || c == '/' || c == '[' || c == ']' || c == '@') return bad("the host '" + hp.host + "' is not a name or address");
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), hp.port);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || port[0] == '+' || port[0] == '-')
    return bad("port '" + port + "' is not a number");
  if (hp.port < min_port || hp.port > 65535)
    return bad("port " + port + " is not in " + std::to_string(min_port) + "..65535");
  return hp;
}

}  // namespace mt

// "host:port" addresses given on a command line (the daemon's --listen and --metrics_listen, the
// CLI's --server): checked before use, so a typo is refused naming the flag instead of being
// passed to a library that reads it some other way (gRPC served "127.0.0.1:99999" on port
// 34463: 99999 mod 65536).
#pragma once
#include <string>

#include "engine/base/status.h"

namespace mt {

struct HostPort {
  std::string host;  // a name, an IPv4 address or an IPv6 address (without brackets)
  int port = 0;
};

// Parses "host:port" or "[v6]:port": the host present, the port a decimal number in
// min_port..65535 (min_port 0 lets a listener ask for any free port). `flag` names the source in
// the error ("--listen").
Result<HostPort> parse_host_port(const std::string& flag, const std::string& address, int min_port = 1);

}  // namespace mt

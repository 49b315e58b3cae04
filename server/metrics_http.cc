// MetricsExporter: GET /metrics over plain HTTP/1.1, one connection at a time (a scrape every
// few seconds needs no more), serialised with prometheus-cpp's text format.
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include <prometheus/text_serializer.h>

#include "server/metrics.h"

namespace mt::server {

namespace {

// "host:port" or "[v6]:port" -> a bound, listening socket.
Result<int> listen_on(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) return invalid_argument("metrics address '" + address + "' needs host:port");
  std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  if (host.size() > 1 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return invalid_argument("metrics address '" + address + "': " + gai_strerror(rc));
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const bool ok = fd >= 0 && bind(fd, res->ai_addr, res->ai_addrlen) == 0 && listen(fd, 16) == 0;
  const int err = errno;
  freeaddrinfo(res);
  if (!ok) {
    if (fd >= 0) close(fd);
    return Status(StatusCode::kUnavailable, "cannot serve /metrics on '" + address + "': " + std::strerror(err));
  }
  return fd;
}

int bound_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

void send_all(int fd, const std::string& data) {
  for (size_t off = 0; off < data.size();) {
    ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += size_t(n);
  }
}

}  // namespace

Result<std::unique_ptr<MetricsExporter>> MetricsExporter::start(const std::string& address,
                                                                std::shared_ptr<prometheus::Registry> registry) {
  MT_ASSIGN_OR_RETURN(int fd, listen_on(address));
  auto e = std::make_unique<MetricsExporter>();
  e->registry_ = std::move(registry);
  e->listen_fd_ = fd;
  e->port_ = bound_port(fd);
  e->thread_ = std::thread([p = e.get()] { p->serve(); });
  return e;
}

MetricsExporter::~MetricsExporter() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
}

void MetricsExporter::serve() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const timeval deadline{2, 0};  // a client that stops reading cannot stall the next scrape
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &deadline, sizeof deadline);
    answer(fd);
    close(fd);
  }
}

void MetricsExporter::answer(int fd) {
  std::string request;
  char buf[2048];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 16384) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 2000) <= 0) return;  // a slow or silent client is dropped
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return;
    request.append(buf, size_t(n));
  }
  const bool get = request.rfind("GET ", 0) == 0;
  const auto path_end = request.find(' ', 4);
  const std::string path = get && path_end != std::string::npos ? request.substr(4, path_end - 4) : "";
  if (path != "/metrics" && path.rfind("/metrics?", 0) != 0) {
    send_all(fd, "HTTP/1.1 404 Not Found\r\nContent-Length: 10\r\nConnection: close\r\n\r\nnot found\n");
    return;
  }
  const std::string body = prometheus::TextSerializer().Serialize(registry_->Collect());
  send_all(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: " +
                   std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
}

}  // namespace mt::server

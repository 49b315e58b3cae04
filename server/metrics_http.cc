// MetricsExporter: GET /metrics over plain HTTP/1.1, serialised with prometheus-cpp's text
// format. One thread polls every connection, so a slow or silent client delays no one else's
// scrape: each connection has 10 s to send its request and take the answer, and past 64 open
// ones the oldest is dropped.
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

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
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);  // accept() never waits
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

// One client's connection: its request as it arrives, then the answer as it leaves.
struct Connection {
  int fd = -1;
  std::chrono::steady_clock::time_point deadline;
  std::string in, out;
  size_t sent = 0;
  bool answered() const { return !out.empty(); }
};

constexpr auto kConnectionSeconds = std::chrono::seconds(10);
constexpr size_t kMaxConnections = 64;
constexpr size_t kMaxRequestBytes = 16384;

bool request_whole(const Connection& c) { return c.in.find("\r\n\r\n") != std::string::npos; }

// Reads what has arrived. False: close it (the client is gone, or its request is too long).
bool read_some(Connection& c) {
  char buf[2048];
  const ssize_t n = recv(c.fd, buf, sizeof buf, 0);
  if (n <= 0) return n < 0 && errno == EAGAIN;
  c.in.append(buf, size_t(n));
  return c.in.size() < kMaxRequestBytes || request_whole(c);
}

// Sends what the socket takes of the answer. False: close it (sent whole, or the client is gone).
bool write_some(Connection& c) {
  const ssize_t n = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
  if (n < 0) return errno == EAGAIN;
  c.sent += size_t(n);
  return c.sent < c.out.size();
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
  std::deque<Connection> conns;  // oldest first
  auto drop = [&](size_t i) {
    close(conns[i].fd);
    conns.erase(conns.begin() + long(i));
  };
  while (!stop_) {
    std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
    for (const Connection& c : conns) fds.push_back({c.fd, short(c.answered() ? POLLOUT : POLLIN), 0});
    if (poll(fds.data(), fds.size(), 200) < 0) continue;
    const auto now = std::chrono::steady_clock::now();
    for (size_t i = conns.size(); i-- > 0;) {  // back to front: drop() shifts what follows
      Connection& c = conns[i];
      bool open = true;
      if (fds[i + 1].revents && !c.answered()) {
        open = read_some(c);
        if (open && request_whole(c)) c.out = answer(c.in);
      }
      if (open && c.answered()) open = write_some(c);
      if (!open || now > c.deadline) drop(i);  // done, gone, or too slow to ask or to take the answer
    }
    if (!(fds[0].revents & POLLIN)) continue;
    for (int fd; (fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0;) {
      if (conns.size() >= kMaxConnections) drop(0);
      conns.push_back(Connection{.fd = fd, .deadline = now + kConnectionSeconds, .in = {}, .out = {}});
    }
  }
  for (const Connection& c : conns) close(c.fd);
}

std::string MetricsExporter::answer(const std::string& request) const {
  const bool get = request.rfind("GET ", 0) == 0;
  const auto path_end = request.find(' ', 4);
  const std::string path = get && path_end != std::string::npos ? request.substr(4, path_end - 4) : "";
  if (path != "/metrics" && path.rfind("/metrics?", 0) != 0)
    return "HTTP/1.1 404 Not Found\r\nContent-Length: 10\r\nConnection: close\r\n\r\nnot found\n";
  const std::string body = prometheus::TextSerializer().Serialize(registry_->Collect());
  return "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

}  // namespace mt::server

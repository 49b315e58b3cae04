#include "client/remote/connection.h"

#include <chrono>
#include <cstdlib>
#include <iterator>

#include "engine/base/address.h"

namespace mt::cli {

namespace {

std::string flag_or_env(const Args& a, const std::string& flag, const char* env, const std::string& def = "") {
  if (a.has(flag)) return a.get(flag);
  const char* v = std::getenv(env);
  return v && *v ? std::string(v) : def;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t b = 0;
  while (b < s.size() && (s[b] == ' ' || s[b] == '\t')) ++b;
  return s.substr(b);
}

// A gRPC target: unix:PATH as given, else HOST:PORT (optionally after dns:///) with a port in
// 1..65535, so that "--server=localhost:99999" is refused instead of reaching another port.
Status check_server_address(const std::string& address) {
  if (address.rfind("unix:", 0) == 0 || address.rfind("unix-abstract:", 0) == 0) return Status::Ok();
  std::string hostport = address;
  if (hostport.rfind("dns:///", 0) == 0) hostport = hostport.substr(7);
  return parse_host_port("--server", hostport).status();
}

}  // namespace

Result<Connection> Connection::open(const Args& a) {
  Connection c;
  c.address_ = flag_or_env(a, "server", "MEGATRAIN_SERVER", "127.0.0.1:50051");
  if (c.address_.empty()) return invalid_argument("--server is empty");
  MT_RETURN_IF_ERROR(check_server_address(c.address_));
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (const std::string ca = flag_or_env(a, "tls-ca", "MEGATRAIN_TLS_CA"); !ca.empty()) {
    auto pem = read_file(ca);
    if (!pem.ok()) return invalid_argument("--tls-ca '" + ca + "': " + pem.status().message());
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = *pem;
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  if (const std::string tf = flag_or_env(a, "token-file", "MEGATRAIN_TOKEN_FILE"); !tf.empty()) {
    auto token = read_file(tf);
    if (!token.ok()) return invalid_argument("--token-file '" + tf + "': " + token.status().message());
    c.token_ = trim(*token);
    if (c.token_.empty()) return invalid_argument("--token-file '" + tf + "' is empty");
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);  // a watch notices a vanished daemon
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);  // also while a watch is idle (a queued job)
  c.channel_ = grpc::CreateCustomChannel(c.address_, creds, args);
  c.stub_ = v1::Trainer::NewStub(c.channel_);
  return c;
}

std::unique_ptr<grpc::ClientContext> Connection::context(double seconds) const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  if (seconds > 0)
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(int64_t(seconds * 1000)));
  if (!token_.empty()) ctx->AddMetadata("authorization", "Bearer " + token_);
  return ctx;
}

int exit_code_for(const grpc::Status& s) {
  switch (s.error_code()) {
    case grpc::StatusCode::OK: return kOk;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED: return kUnreachable;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::ALREADY_EXISTS: return kUsage;
    default: return kJobFailed;
  }
}

namespace {
// The canonical name of a gRPC status code ("RESOURCE_EXHAUSTED"), as --json errors carry it.
const char* grpc_code_name(grpc::StatusCode c) {
  static const char* const kNames[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
                                       "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
                                       "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  const int i = int(c);
  return i >= 0 && i < int(std::size(kNames)) ? kNames[i] : "UNKNOWN";
}
}  // namespace

int Connection::fail(const grpc::Status& s, const std::string& what, const Json& details) const {
  std::string msg = s.error_message();
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) msg = "cannot reach megatraind at " + address_ + " (" + msg + ")";
  else if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) msg = "megatraind at " + address_ + " did not answer in time";
  else if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED) msg = "megatraind refused the credentials: " + msg;
  Json d = Json::object({{"code", grpc_code_name(s.error_code())}});
  if (details.is_object())
    for (const auto& [k, v] : details.members()) d.set(k, v);
  return cli::fail(exit_code_for(s), what + ": " + msg, d);
}

}  // namespace mt::cli

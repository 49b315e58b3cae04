// The channel to megatraind: address, TLS and bearer token from the global flags or the
// environment, per-call contexts with deadlines and the token metadata, and the mapping from
// gRPC status codes to the CLI's exit codes.
#pragma once
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "client/cli.h"
#include "megatrain/v1/trainer.grpc.pb.h"

namespace mt::cli {

namespace v1 = megatrain::v1;

class Connection {
 public:
  // --server / MEGATRAIN_SERVER (default 127.0.0.1:50051), --tls-ca / MEGATRAIN_TLS_CA,
  // --token-file / MEGATRAIN_TOKEN_FILE. Fails (usage) when a named file cannot be read.
  static Result<Connection> open(const Args& a);

  v1::Trainer::Stub& stub() { return *stub_; }
  const std::string& address() const { return address_; }
  // A context for one call: the bearer token, and a deadline unless `seconds` <= 0.
  std::unique_ptr<grpc::ClientContext> context(double seconds = 30) const;
  // Prints "megatrain: WHAT: MESSAGE" and returns the exit code for `s` (see exit_code_for);
  // with --json also the error object, its "code" the gRPC status name, and `details`.
  int fail(const grpc::Status& s, const std::string& what, const Json& details = Json::object()) const;

 private:
  std::string address_, token_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Trainer::Stub> stub_;
};

// UNAVAILABLE, DEADLINE_EXCEEDED, UNAUTHENTICATED, PERMISSION_DENIED -> 3 (server unreachable or
// refused us); INVALID_ARGUMENT, NOT_FOUND, OUT_OF_RANGE, FAILED_PRECONDITION,
// RESOURCE_EXHAUSTED, ALREADY_EXISTS -> 2 (bad request); anything else -> 1.
int exit_code_for(const grpc::Status& s);

}  // namespace mt::cli

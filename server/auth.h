// Bearer-token check for every Trainer call (`authorization: Bearer TOKEN` metadata).
#pragma once
#include <grpcpp/server_context.h>

#include <string>

#include "engine/base/status.h"

namespace mt::server {

class Authenticator {
 public:
  Authenticator() = default;  // no token configured: every call passes
  static Result<Authenticator> from_file(const std::string& path);
  static Authenticator with_token(std::string token);
  bool enabled() const { return !token_.empty(); }
  grpc::Status check(const grpc::ServerContextBase& ctx) const;

 private:
  std::string token_;
};

}  // namespace mt::server

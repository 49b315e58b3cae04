// Bearer tokens and their roles for every Trainer call (`authorization: Bearer TOKEN` metadata).
//
// The token file (--auth_token_file) holds one token per line, optionally followed by its role:
//   3f9c...e1            # no role: admin (a token file from before roles still works)
//   77ab...02 read       # read: GetJob, ListJobs, WatchJob, PlanJob, StreamLogs of a job (not the
//                        # daemon's own log) and ListCheckpoints: what a dashboard needs
//   c0de...9a admin      # admin: everything
// Blank lines and text after '#' are ignored; tokens are at least 16 characters.
#pragma once
#include <grpcpp/server_context.h>

#include <string>
#include <vector>

#include "engine/base/status.h"

namespace mt::server {

enum class Role { kRead, kAdmin };  // each role may do what the one before it may
const char* role_name(Role r);      // "read", "admin"

class Authenticator {
 public:
  Authenticator() = default;  // no token configured: every call passes
  static Result<Authenticator> from_file(const std::string& path);
  static Authenticator with_token(std::string token, Role role = Role::kAdmin);
  bool enabled() const { return !tokens_.empty(); }
  // UNAUTHENTICATED without a known token; PERMISSION_DENIED naming the role `rpc` needs when
  // the token's role is below `needed`.
  grpc::Status authorize(const grpc::ServerContextBase& ctx, const char* rpc, Role needed) const;

 private:
  struct Token {
    std::string bearer;  // "Bearer " + token, as the metadata carries it
    Role role;
  };
  std::vector<Token> tokens_;
};

}  // namespace mt::server

#include "server/auth.h"

#include <sstream>

#include "engine/base/json.h"

namespace mt::server {

const char* role_name(Role r) { return r == Role::kRead ? "read" : "admin"; }

namespace {

// Compares in time independent of where the strings differ.
bool same_secret(const std::string& got, const std::string& want) {
  unsigned diff = got.size() != want.size();
  for (size_t i = 0; i < want.size(); ++i) diff |= unsigned(uint8_t(want[i]) ^ uint8_t(i < got.size() ? got[i] : 0));
  return diff == 0;
}

}  // namespace

Result<Authenticator> Authenticator::from_file(const std::string& path) {
  Authenticator a;
  if (path.empty()) return a;
  MT_ASSIGN_OR_RETURN(std::string text, read_file(path));
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (auto h = line.find('#'); h != std::string::npos) line.resize(h);
    std::istringstream words(line);
    std::string token, role, extra;
    if (!(words >> token)) continue;
    words >> role >> extra;
    const std::string where = "--auth_token_file '" + path + "' line " + std::to_string(n);
    if (token.size() < 16) return invalid_argument(where + " holds a token shorter than 16 characters");
    if (!extra.empty()) return invalid_argument(where + ": expected `TOKEN [read|admin]`, got more words");
    if (!role.empty() && role != "read" && role != "admin")
      return invalid_argument(where + ": role '" + role + "' is not read or admin");
    for (const Token& t : a.tokens_)
      if (t.bearer == "Bearer " + token) return invalid_argument(where + " repeats a token");
    a.tokens_.push_back({"Bearer " + token, role == "read" ? Role::kRead : Role::kAdmin});
  }
  if (a.tokens_.empty()) return invalid_argument("--auth_token_file '" + path + "' holds no token");
  return a;
}

Authenticator Authenticator::with_token(std::string token, Role role) {
  Authenticator a;
  a.tokens_.push_back({"Bearer " + token, role});
  return a;
}

grpc::Status Authenticator::authorize(const grpc::ServerContextBase& ctx, const char* rpc, Role needed) const {
  if (tokens_.empty()) return grpc::Status::OK;
  const auto& md = ctx.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return {grpc::StatusCode::UNAUTHENTICATED, "missing 'authorization: Bearer <token>' metadata"};
  const std::string got(it->second.data(), it->second.size());
  const Token* match = nullptr;
  for (const Token& t : tokens_)  // every token compared, so the time does not tell which matched
    if (same_secret(got, t.bearer)) match = &t;
  if (!match) return {grpc::StatusCode::UNAUTHENTICATED, "wrong bearer token"};
  if (match->role < needed)
    return {grpc::StatusCode::PERMISSION_DENIED, std::string(rpc) + " needs role " + role_name(needed) +
                                                     "; this token has role " + role_name(match->role)};
  return grpc::Status::OK;
}

}  // namespace mt::server

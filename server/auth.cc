#include "server/auth.h"

#include "engine/base/json.h"

namespace mt::server {

Result<Authenticator> Authenticator::from_file(const std::string& path) {
  Authenticator a;
  if (path.empty()) return a;
  MT_ASSIGN_OR_RETURN(std::string text, read_file(path));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  if (text.size() < 16) return invalid_argument("--auth_token_file '" + path + "' holds a token shorter than 16 characters");
  a.token_ = text;
  return a;
}

Authenticator Authenticator::with_token(std::string token) {
  Authenticator a;
  a.token_ = std::move(token);
  return a;
}

grpc::Status Authenticator::check(const grpc::ServerContextBase& ctx) const {
  if (token_.empty()) return grpc::Status::OK;
  const auto& md = ctx.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return {grpc::StatusCode::UNAUTHENTICATED, "missing 'authorization: Bearer <token>' metadata"};
  const std::string got(it->second.data(), it->second.size());
  const std::string want = "Bearer " + token_;
  unsigned diff = got.size() != want.size();
  for (size_t i = 0; i < want.size(); ++i) diff |= unsigned(uint8_t(want[i]) ^ uint8_t(i < got.size() ? got[i] : 0));
  if (diff) return {grpc::StatusCode::UNAUTHENTICATED, "wrong bearer token"};
  return grpc::Status::OK;
}

}  // namespace mt::server

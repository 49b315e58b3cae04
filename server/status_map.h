// Engine Status <-> canonical gRPC status codes.
#pragma once
#include <grpcpp/support/status.h>

#include <string>

#include "engine/base/status.h"

namespace mt::server {

inline grpc::StatusCode to_grpc_code(StatusCode c) {
  switch (c) {
    case StatusCode::kOk: return grpc::StatusCode::OK;
    case StatusCode::kInvalidArgument: return grpc::StatusCode::INVALID_ARGUMENT;
    case StatusCode::kNotFound: return grpc::StatusCode::NOT_FOUND;
    case StatusCode::kOutOfRange: return grpc::StatusCode::OUT_OF_RANGE;
    case StatusCode::kFailedPrecondition: return grpc::StatusCode::FAILED_PRECONDITION;
    case StatusCode::kResourceExhausted: return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case StatusCode::kUnimplemented: return grpc::StatusCode::UNIMPLEMENTED;
    case StatusCode::kDataLoss: return grpc::StatusCode::DATA_LOSS;
    case StatusCode::kCancelled: return grpc::StatusCode::CANCELLED;
    case StatusCode::kUnavailable: return grpc::StatusCode::UNAVAILABLE;
    case StatusCode::kInternal: return grpc::StatusCode::INTERNAL;
    case StatusCode::kDeviceLost: return grpc::StatusCode::UNAVAILABLE;  // the daemon restarts
  }
  return grpc::StatusCode::UNKNOWN;
}

// A message goes out in a header (grpc-message), which clients refuse past ~8-16 KiB: one that
// quotes a client's enormous input keeps its start and end, and says how much was cut.
// The cuts fall between UTF-8 characters.
inline std::string clip_message(const std::string& m, size_t max = 4096) {
  if (m.size() <= max) return m;
  auto continuation = [&](size_t i) { return i < m.size() && (static_cast<unsigned char>(m[i]) & 0xC0) == 0x80; };
  size_t head = max / 2, tail_at = m.size() - max / 4;
  while (head > 0 && continuation(head)) --head;
  while (continuation(tail_at)) ++tail_at;
  return m.substr(0, head) + " ... [" + std::to_string(tail_at - head) + " bytes cut] ... " + m.substr(tail_at);
}

inline grpc::Status to_grpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(to_grpc_code(s.code()), clip_message(s.message()));
}

}  // namespace mt::server

// Engine Status <-> canonical gRPC status codes.
#pragma once
#include <grpcpp/support/status.h>

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

inline grpc::Status to_grpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(to_grpc_code(s.code()), s.message());
}

}  // namespace mt::server

#include "engine/dist/communicator.h"

namespace mt {

size_t comm_type_bytes(CommType t) { return t == CommType::kF64 ? sizeof(double) : sizeof(float); }

Status wait_for_stream(const CommOrder& at, int rank) {
  if (!at.backend) return Status::Ok();
  at.backend->host_wait(at.backend->record(at.stream));
  const Status e = at.backend->error();
  if (e.ok()) return e;
  return Status(e.code(), "rank " + std::to_string(rank) + " failed: " + e.message());
}

Status check_root(int root, int size) {
  if (root >= 0 && root < size) return Status::Ok();
  return invalid_argument("root = " + std::to_string(root) + " is not a rank of a group of " + std::to_string(size));
}

}  // namespace mt

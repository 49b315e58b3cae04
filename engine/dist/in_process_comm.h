// InProcessComm: a group of N ranks inside one process — one per device of a `devices: N` job,
// each driven by its own thread — whose buffers every rank can address (the CPU backend's device
// memory is host memory). A collective is a rendezvous: every rank posts its buffers, each rank
// then reduces its own 1/N of the elements, and all leave together. The sum of every element is
// taken in rank order, (((rank 0 + rank 1) + rank 2) + ...), whichever rank computes it, so the
// result is bit-identical to a serial sum in rank order and the same on every rank.
// Waits are bounded by CommOptions::timeout_seconds; a rank's abort() fails the others at once.
#pragma once
#include <memory>
#include <vector>

#include "engine/dist/communicator.h"

namespace mt {

// The N communicators of one group, rank r at index r. They share the group; each is used by one
// thread at a time (its rank's).
std::vector<std::unique_ptr<Communicator>> make_in_process_comms(int size, const CommOptions& opt = {});

}  // namespace mt

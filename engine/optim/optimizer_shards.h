// Sharding the optimizer over several processes (nodes): each unit's Adam state lives on one
// process, its owner, which alone updates the unit; the others receive its updated masters.
// Owners depend only on the units and the process count, so every process computes the same
// assignment, and a checkpoint written with one count resumes with another (its optimizer shards
// are named per unit in an index; checkpoint.h).
#pragma once
#include <vector>

#include "engine/model/param_schema.h"
#include "engine/optim/host_store.h"

namespace mt {

// The owner (0..processes-1) of every unit: largest unit first, each to the process with the
// fewest parameters so far (ties: the lower rank), so the largest share exceeds the mean by at
// most one unit.
std::vector<int> optimizer_shard_owners(const std::vector<ParamSchema>& units, int processes);

// The units `rank` holds Adam state for, as HostStore::create takes them.
MomentUnits moments_of_rank(const std::vector<int>& owners, int rank);

}  // namespace mt
